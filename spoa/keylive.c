/* keylive: per-key live figures (see keylive.h). Any thread, under one mutex. */
#include "keylive.h"

#include <pthread.h>
#include <stdlib.h>

struct keylive {
	pthread_mutex_t lock;
	struct live_key *slots;     /* open addressing on key_id; key_id 0 marks empty */
	size_t nslots;              /* power of two */
	size_t used;
};

#define KEYLIVE_NONE 0          /* rows without a key are not per-key figures */

static struct live_key *keylive_find(struct live_key *slots, size_t n, int64_t key_id)
{
	size_t i = ((uint64_t)key_id * 11400714819323198485u) >> 40 & (n - 1);

	while (slots[i].key_id != KEYLIVE_NONE && slots[i].key_id != key_id)
		i = (i + 1) & (n - 1);
	return &slots[i];
}

/* Keeps the table at most half full; on ENOMEM the table stays as it is and the key's
 * figures are not counted (the live view is advisory, rows are not affected). */
static struct live_key *keylive_slot(struct keylive *k, int64_t key_id)
{
	struct live_key *s = keylive_find(k->slots, k->nslots, key_id);

	if (s->key_id == key_id)
		return s;
	if (2 * (k->used + 1) > k->nslots) {
		size_t n = k->nslots * 2, i;
		struct live_key *grown = calloc(n, sizeof(*grown));

		if (!grown)
			return NULL;
		for (i = 0; i < k->nslots; i++)
			if (k->slots[i].key_id != KEYLIVE_NONE)
				*keylive_find(grown, n, k->slots[i].key_id) = k->slots[i];
		free(k->slots);
		k->slots = grown;
		k->nslots = n;
		s = keylive_find(k->slots, k->nslots, key_id);
	}
	s->key_id = key_id;
	k->used++;
	return s;
}

struct keylive *keylive_new(void)
{
	struct keylive *k = calloc(1, sizeof(*k));

	if (!k)
		return NULL;
	k->nslots = 64;
	if (!(k->slots = calloc(k->nslots, sizeof(*k->slots)))) {
		free(k);
		return NULL;
	}
	pthread_mutex_init(&k->lock, NULL);
	return k;
}

void keylive_free(struct keylive *k)
{
	if (!k)
		return;
	pthread_mutex_destroy(&k->lock);
	free(k->slots);
	free(k);
}

void keylive_admit(struct keylive *k, int64_t key_id)
{
	struct live_key *s;

	if (key_id <= 0)
		return;
	pthread_mutex_lock(&k->lock);
	if ((s = keylive_slot(k, key_id)))
		s->inflight++;
	pthread_mutex_unlock(&k->lock);
}

static int64_t keylive_known(int64_t v)
{
	return v == ACCT_NONE ? 0 : v;
}

void keylive_ended(struct keylive *k, int64_t key_id)
{
	struct live_key *s;

	if (key_id <= 0)
		return;
	pthread_mutex_lock(&k->lock);
	if ((s = keylive_slot(k, key_id)) && s->inflight > 0)
		s->inflight--;
	pthread_mutex_unlock(&k->lock);
}

void keylive_row(struct keylive *k, const struct acct_row *row)
{
	struct live_key *s;

	if (row->key_id <= 0)
		return;
	pthread_mutex_lock(&k->lock);
	if ((s = keylive_slot(k, row->key_id))) {
		s->requests++;
		s->errors += row->outcome != ACCT_COMPLETE;
		s->prompt_tokens += keylive_known(row->prompt_tokens);
		s->completion_tokens += keylive_known(row->completion_tokens);
		s->cost_micros += keylive_known(row->cost_micros);
	}
	pthread_mutex_unlock(&k->lock);
}

void keylive_each(struct keylive *k, void (*cb)(void *cbarg, const struct live_key *lk),
                  void *cbarg)
{
	size_t i;

	pthread_mutex_lock(&k->lock);
	for (i = 0; i < k->nslots; i++)
		if (k->slots[i].key_id != KEYLIVE_NONE)
			cb(cbarg, &k->slots[i]);
	pthread_mutex_unlock(&k->lock);
}
