/* pending: decided transactions awaiting their record (see pending.h). Any thread;
 * each shard has its own mutex, held only for a hash-chain walk. */
#include "pending.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"

#define PENDING_SHARDS 64              /* power of two */
#define PENDING_MIN_BUCKETS 64
#define PENDING_DONE_MAX 16384         /* finished marks kept at once, over all shards */

/* An entry is a decided transaction awaiting its record, or (done) the mark of one whose
 * record came before its decision: only row.request_id is set. */
struct pending_entry {
	struct pending_entry *next;
	int64_t added_ms;
	int done;
	struct acct_row row;
};

struct pending_shard {
	pthread_mutex_t lock;
	struct pending_entry **buckets;
	size_t nbuckets;                   /* power of two */
	size_t count;
};

struct pending {
	struct pending_shard shards[PENDING_SHARDS];
	atomic_size_t count;               /* entries awaiting a record */
	size_t max;
	atomic_size_t done;                /* finished marks */
};

/* Over the whole id: HAProxy's ids share their time prefix, the hash spreads them. */
static uint64_t pending_hash(const char *id)
{
	return hash_str64(id);
}

static struct pending_shard *pending_shard_of(struct pending *p, uint64_t h)
{
	return &p->shards[h & (PENDING_SHARDS - 1)];
}

static struct pending_entry **pending_slot(struct pending_shard *s, uint64_t h, const char *id)
{
	struct pending_entry **e = &s->buckets[(h >> 8) & (s->nbuckets - 1)];

	while (*e && strcmp((*e)->row.request_id, id) != 0)
		e = &(*e)->next;
	return e;
}

/* Doubles the bucket array when chains grow past two on average; keeps the old one if
 * memory is short (lookups stay correct, only slower). */
static void pending_grow(struct pending_shard *s)
{
	size_t n = s->nbuckets * 2, i;
	struct pending_entry **b = calloc(n, sizeof(*b));

	if (!b)
		return;
	for (i = 0; i < s->nbuckets; i++) {
		struct pending_entry *e = s->buckets[i], *next;

		for (; e; e = next) {
			size_t j = (pending_hash(e->row.request_id) >> 8) & (n - 1);

			next = e->next;
			e->next = b[j];
			b[j] = e;
		}
	}
	free(s->buckets);
	s->buckets = b;
	s->nbuckets = n;
}

struct pending *pending_new(size_t max)
{
	struct pending *p = calloc(1, sizeof(*p));
	int i;

	if (!p)
		return NULL;
	p->max = max;
	for (i = 0; i < PENDING_SHARDS; i++) {
		struct pending_shard *s = &p->shards[i];

		pthread_mutex_init(&s->lock, NULL);
		s->nbuckets = PENDING_MIN_BUCKETS;
		if (!(s->buckets = calloc(s->nbuckets, sizeof(*s->buckets)))) {
			pending_free(p);
			return NULL;
		}
	}
	return p;
}

void pending_free(struct pending *p)
{
	int i;

	if (!p)
		return;
	for (i = 0; i < PENDING_SHARDS; i++) {
		struct pending_shard *s = &p->shards[i];
		size_t b;

		for (b = 0; s->buckets && b < s->nbuckets; b++) {
			struct pending_entry *e = s->buckets[b], *next;

			for (; e; e = next) {
				next = e->next;
				free(e);
			}
		}
		free(s->buckets);
		pthread_mutex_destroy(&s->lock);
	}
	free(p);
}

int pending_add(struct pending *p, const struct acct_row *row, int64_t now_ms,
                struct acct_row *replaced)
{
	uint64_t h = pending_hash(row->request_id);
	struct pending_shard *s = pending_shard_of(p, h);
	struct pending_entry **slot, *e;

	pthread_mutex_lock(&s->lock);
	slot = pending_slot(s, h, row->request_id);
	if (*slot && (*slot)->done) {
		e = *slot;
		*slot = e->next;
		s->count--;
		pthread_mutex_unlock(&s->lock);
		atomic_fetch_sub(&p->done, 1);
		free(e);
		return 2;
	}
	if (*slot) {
		if (replaced)
			*replaced = (*slot)->row;
		(*slot)->row = *row;
		(*slot)->added_ms = now_ms;
		pthread_mutex_unlock(&s->lock);
		return 1;
	}
	/* Bounded over all shards: a slight overshoot by racing threads is harmless. */
	if (atomic_load(&p->count) >= p->max || !(e = malloc(sizeof(*e)))) {
		pthread_mutex_unlock(&s->lock);
		return -1;
	}
	e->row = *row;
	e->added_ms = now_ms;
	e->done = 0;
	e->next = NULL;
	*slot = e;
	if (++s->count > 2 * s->nbuckets)
		pending_grow(s);
	pthread_mutex_unlock(&s->lock);
	atomic_fetch_add(&p->count, 1);
	return 0;
}

int pending_finish(struct pending *p, const char *id, int64_t now_ms)
{
	uint64_t h = pending_hash(id);
	struct pending_shard *s = pending_shard_of(p, h);
	struct pending_entry **slot, *e;

	if (strlen(id) >= sizeof(e->row.request_id) ||
	    atomic_fetch_add(&p->done, 1) >= PENDING_DONE_MAX) {
		atomic_fetch_sub(&p->done, 1);
		return -1;
	}
	pthread_mutex_lock(&s->lock);
	slot = pending_slot(s, h, id);
	if (*slot || !(e = calloc(1, sizeof(*e)))) {
		pthread_mutex_unlock(&s->lock);
		atomic_fetch_sub(&p->done, 1);
		return -1;
	}
	memcpy(e->row.request_id, id, strlen(id) + 1);
	e->added_ms = now_ms;
	e->done = 1;
	*slot = e;
	if (++s->count > 2 * s->nbuckets)
		pending_grow(s);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

int pending_take(struct pending *p, const char *id, struct acct_row *out)
{
	uint64_t h = pending_hash(id);
	struct pending_shard *s = pending_shard_of(p, h);
	struct pending_entry **slot, *e;

	pthread_mutex_lock(&s->lock);
	slot = pending_slot(s, h, id);
	if (!(e = *slot) || e->done) {
		pthread_mutex_unlock(&s->lock);
		return 0;
	}
	*slot = e->next;
	s->count--;
	pthread_mutex_unlock(&s->lock);
	atomic_fetch_sub(&p->count, 1);
	*out = e->row;
	free(e);
	return 1;
}

size_t pending_expire(struct pending *p, int64_t cutoff_ms, int64_t done_cutoff_ms,
                      void (*cb)(void *arg, const struct acct_row *row), void *arg)
{
	size_t n = 0;
	int i;

	for (i = 0; i < PENDING_SHARDS; i++) {
		struct pending_shard *s = &p->shards[i];
		struct pending_entry *expired = NULL, *e;
		size_t b;

		/* Unlink under the lock, call back outside it: cb may take other locks. */
		pthread_mutex_lock(&s->lock);
		for (b = 0; b < s->nbuckets; b++) {
			struct pending_entry **slot = &s->buckets[b];

			while ((e = *slot)) {
				if (e->added_ms < (e->done ? done_cutoff_ms : cutoff_ms)) {
					*slot = e->next;
					e->next = expired;
					expired = e;
					s->count--;
				} else {
					slot = &e->next;
				}
			}
		}
		pthread_mutex_unlock(&s->lock);
		while ((e = expired)) {
			expired = e->next;
			if (e->done) {
				atomic_fetch_sub(&p->done, 1);
			} else {
				atomic_fetch_sub(&p->count, 1);
				cb(arg, &e->row);
				n++;
			}
			free(e);
		}
	}
	return n;
}

size_t pending_count(struct pending *p)
{
	return atomic_load(&p->count);
}

void pending_each(struct pending *p, size_t max, int64_t now_ms,
                  void (*cb)(void *cbarg, const struct live_txn *t), void *cbarg)
{
	size_t n = 0, b;
	int i;

	for (i = 0; i < PENDING_SHARDS && n < max; i++) {
		struct pending_shard *s = &p->shards[i];

		pthread_mutex_lock(&s->lock);
		for (b = 0; b < s->nbuckets && n < max; b++) {
			const struct pending_entry *e;

			for (e = s->buckets[b]; e && n < max; e = e->next) {
				struct live_txn t = {
					.request_id = e->row.request_id,
					.key_id = e->row.key_id,
					.model = e->row.model_requested,
					.stream = e->row.stream,
					.age_ms = now_ms - e->added_ms,
				};

				if (e->done)
					continue;
				cb(cbarg, &t);
				n++;
			}
		}
		pthread_mutex_unlock(&s->lock);
	}
}
