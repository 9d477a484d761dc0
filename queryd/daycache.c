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
	free(e->cells);
	memset(e, 0, sizeof(*e));
}

/* The values of r in their order in a packed row. */
static void daycache_values(const struct daycache_row *r, uint64_t v[DAYCACHE_VALUES])
{
	int j;

	v[0] = (uint64_t)r->id;
	for (j = 0; j < ROLLUP_NAMED; j++)
		v[1 + j] = (uint64_t)r->sum[j];
	for (j = 0; j < LATENCY_BUCKETS; j++)
		v[1 + ROLLUP_NAMED + j] = r->lat[j];
}

static size_t daycache_row_size(int narrow)
{
	return DAYCACHE_VALUES * (narrow ? sizeof(uint32_t) : sizeof(uint64_t));
}

int daycache_pack(struct daycache_entry *e, const struct daycache_row *rows, size_t n)
{
	uint64_t v[DAYCACHE_VALUES];
	size_t i;
	int j, narrow = 1;
	void *cells;

	/* a negative value as uint64_t is over UINT32_MAX too */
	for (i = 0; i < n && narrow; i++) {
		daycache_values(&rows[i], v);
		for (j = 0; j < DAYCACHE_VALUES; j++)
			if (v[j] > UINT32_MAX)
				narrow = 0;
	}
	cells = malloc(n ? n * daycache_row_size(narrow) : 1);
	if (!cells)
		return -1;
	for (i = 0; i < n; i++) {
		daycache_values(&rows[i], v);
		for (j = 0; j < DAYCACHE_VALUES; j++) {
			if (narrow)
				((uint32_t *)cells)[i * DAYCACHE_VALUES + j] = (uint32_t)v[j];
			else
				((uint64_t *)cells)[i * DAYCACHE_VALUES + j] = v[j];
		}
	}
	free(e->cells);
	e->cells = cells;
	e->n = n;
	e->narrow = narrow;
	return 0;
}

void daycache_row_at(const struct daycache_entry *e, size_t i, struct daycache_row *out)
{
	uint64_t v[DAYCACHE_VALUES];
	int j;

	for (j = 0; j < DAYCACHE_VALUES; j++)
		v[j] = e->narrow ? ((const uint32_t *)e->cells)[i * DAYCACHE_VALUES + j]
		                 : ((const uint64_t *)e->cells)[i * DAYCACHE_VALUES + j];
	out->id = (int64_t)v[0];
	for (j = 0; j < ROLLUP_NAMED; j++)
		out->sum[j] = (int64_t)v[1 + j];
	for (j = 0; j < LATENCY_BUCKETS; j++)
		out->lat[j] = v[1 + ROLLUP_NAMED + j];
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
		size_t bytes = daycache_v[i].n * daycache_row_size(daycache_v[i].narrow);

		*out = daycache_v[i];
		out->cells = malloc(bytes ? bytes : 1);
		if (out->cells) {
			if (bytes)
				memcpy(out->cells, daycache_v[i].cells, bytes);
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
