/* daycache: the kept sums of summaries' days (see daycache.h). Any request thread; the
 * entries are touched only under daycache_lock, and a reader gets a copy, so an entry
 * replaced meanwhile never changes under it. */
#include "daycache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t daycache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct daycache_entry daycache_v[DAYCACHE_ENTRIES];
static uint64_t daycache_used[DAYCACHE_ENTRIES];   /* last use; 0: the slot is empty */
static uint64_t daycache_clock;

static int daycache_key_is(const struct daycache_key *a, const struct daycache_key *b)
{
	return a->day_from == b->day_from && a->day_to == b->day_to &&
	       a->has_key_id == b->has_key_id && a->key_id == b->key_id;
}

/* The slot holding k, or -1. Under the lock. */
static int daycache_find(const struct daycache_key *k)
{
	int i;

	for (i = 0; i < DAYCACHE_ENTRIES; i++)
		if (daycache_used[i] && daycache_key_is(&daycache_v[i].key, k))
			return i;
	return -1;
}

void daycache_entry_free(struct daycache_entry *e)
{
	free(e->rows);
	memset(e, 0, sizeof(*e));
}

/* Empties slot i. Under the lock. */
static void daycache_drop(int i)
{
	daycache_entry_free(&daycache_v[i]);
	daycache_used[i] = 0;
}

int daycache_get(const struct daycache_key *k, struct daycache_entry *out)
{
	int i, rc = 0;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&daycache_lock);
	i = daycache_find(k);
	if (i >= 0) {
		*out = daycache_v[i];
		out->rows = malloc(out->n ? out->n * sizeof(*out->rows) : 1);
		if (out->rows) {
			if (out->n)
				memcpy(out->rows, daycache_v[i].rows, out->n * sizeof(*out->rows));
			daycache_used[i] = ++daycache_clock;
			rc = 1;
		} else {
			memset(out, 0, sizeof(*out));
			rc = -1;
		}
	}
	pthread_mutex_unlock(&daycache_lock);
	return rc;
}

/* The least recently used slot but keep: an empty one first if empty_ok, else only
 * the kept ones (-1 if none). Under the lock. */
static int daycache_oldest(int keep, int empty_ok)
{
	int i, at = -1;

	for (i = 0; i < DAYCACHE_ENTRIES; i++)
		if (i != keep && (empty_ok || daycache_used[i]) &&
		    (at < 0 || daycache_used[i] < daycache_used[at]))
			at = i;
	return at;
}

void daycache_put(struct daycache_entry *e)
{
	size_t rows = 0;
	int i, at;

	if (e->n > DAYCACHE_ROWS_MAX) {
		daycache_entry_free(e);
		return;
	}
	pthread_mutex_lock(&daycache_lock);
	at = daycache_find(&e->key);
	if (at < 0)
		at = daycache_oldest(-1, 1);
	daycache_drop(at);
	daycache_v[at] = *e;
	daycache_used[at] = ++daycache_clock;
	memset(e, 0, sizeof(*e));
	for (i = 0; i < DAYCACHE_ENTRIES; i++)
		rows += daycache_v[i].n;
	/* e->n <= DAYCACHE_ROWS_MAX: another entry is kept while rows exceed it */
	while (rows > DAYCACHE_ROWS_MAX && (i = daycache_oldest(at, 0)) >= 0) {
		rows -= daycache_v[i].n;
		daycache_drop(i);
	}
	pthread_mutex_unlock(&daycache_lock);
}

void daycache_clear(void)
{
	int i;

	pthread_mutex_lock(&daycache_lock);
	for (i = 0; i < DAYCACHE_ENTRIES; i++)
		daycache_drop(i);
	pthread_mutex_unlock(&daycache_lock);
}
