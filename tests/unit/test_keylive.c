/* Unit tests of keylive: in flight from admission to row, figures per key, rows without
 * a key or an admission, growth past the first table, and two threads at once. */
#include <pthread.h>

#include "acct.h"
#include "keylive.h"
#include "unit.h"

#define KEYS 1000

struct found {
	struct live_key k[KEYS + 1];
	int n;
};

static void collect(void *arg, const struct live_key *lk)
{
	struct found *f = arg;

	if (lk->key_id >= 1 && lk->key_id <= KEYS)
		f->k[lk->key_id] = *lk;
	f->n++;
}

static void row_of(struct acct_row *r, int64_t key_id, enum acct_outcome o)
{
	acct_row_init(r);
	r->key_id = key_id;
	r->outcome = o;
	r->prompt_tokens = 10;
	r->completion_tokens = 5;
	r->cost_micros = 7;
}

static void test_one_key(void)
{
	struct keylive *kl = keylive_new();
	struct found f = { .n = 0 };
	struct acct_row r;

	keylive_admit(kl, 4);
	keylive_admit(kl, 4);
	row_of(&r, 4, ACCT_COMPLETE);
	keylive_row(kl, &r);
	keylive_ended(kl, r.key_id);
	/* unknown counts add nothing; an error outcome counts as an error */
	row_of(&r, 4, ACCT_UPSTREAM_ERROR);
	r.prompt_tokens = r.completion_tokens = r.cost_micros = ACCT_NONE;
	keylive_row(kl, &r);
	keylive_ended(kl, r.key_id);
	/* a row nobody admitted (HAProxy answered alone) is not taken from in flight */
	keylive_admit(kl, 4);
	row_of(&r, 4, ACCT_GATEWAY_REJECTED);
	keylive_row(kl, &r);
	/* no key: not a per-key figure */
	keylive_admit(kl, ACCT_NONE);
	row_of(&r, ACCT_NONE, ACCT_DENIED);
	keylive_row(kl, &r);
	keylive_each(kl, collect, &f);
	CHECK_EQ_INT(f.n, 1);
	CHECK_EQ_INT(f.k[4].inflight, 1);
	CHECK_EQ_INT(f.k[4].requests, 3);
	CHECK_EQ_INT(f.k[4].errors, 2);
	CHECK_EQ_INT(f.k[4].prompt_tokens, 20);
	CHECK_EQ_INT(f.k[4].completion_tokens, 10);
	CHECK_EQ_INT(f.k[4].cost_micros, 14);
	/* in flight never goes below zero */
	row_of(&r, 4, ACCT_COMPLETE);
	keylive_row(kl, &r);
	keylive_ended(kl, r.key_id);
	keylive_row(kl, &r);
	keylive_ended(kl, r.key_id);
	f.n = 0;
	keylive_each(kl, collect, &f);
	CHECK_EQ_INT(f.k[4].inflight, 0);
	keylive_free(kl);
}

struct load {
	struct keylive *kl;
};

static void *load_main(void *arg)
{
	struct load *l = arg;
	struct acct_row r;
	int round, id;

	for (round = 0; round < 20; round++)
		for (id = 1; id <= KEYS; id++) {
			keylive_admit(l->kl, id);
			row_of(&r, id, ACCT_COMPLETE);
			keylive_row(l->kl, &r);
			keylive_ended(l->kl, r.key_id);
		}
	return NULL;
}

static void test_many_keys_two_threads(void)
{
	struct keylive *kl = keylive_new();
	struct load l = { kl };
	static struct found f;
	pthread_t t[2];
	int i, wrong = 0;

	for (i = 0; i < 2; i++)
		CHECK_EQ_INT(pthread_create(&t[i], NULL, load_main, &l), 0);
	for (i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	f.n = 0;
	keylive_each(kl, collect, &f);
	CHECK_EQ_INT(f.n, KEYS);
	for (i = 1; i <= KEYS; i++)
		wrong += f.k[i].requests != 40 || f.k[i].inflight != 0 || f.k[i].cost_micros != 280;
	CHECK_EQ_INT(wrong, 0);
	keylive_free(kl);
}

int main(void)
{
	RUN(test_one_key);
	RUN(test_many_keys_two_threads);
	return UNIT_DONE();
}
