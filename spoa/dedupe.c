/* dedupe: recently seen request ids (see dedupe.h). Intake thread only.
 *
 * A FIFO of (hash, time) in arrival order makes expiry a walk from its head; a linear-
 * probing set of the same hashes answers lookups. A 64-bit FNV-1a of a request id collides
 * with another id in the window with negligible probability. */
#include "dedupe.h"

#include <stdlib.h>
#include <string.h>

#include "hash.h"

struct dedupe_item {
	uint64_t hash;
	int64_t at_ms;
};

struct dedupe {
	int64_t window_ms;
	struct dedupe_item *fifo;     /* ring */
	size_t head, len, cap;        /* cap: power of two */
	uint64_t *set;                /* 0: empty slot */
	size_t nset;                  /* power of two, >= 2 * cap */
};

/* 0 marks an empty slot: no id may hash to it. */
static uint64_t dedupe_hash(const char *id)
{
	uint64_t h = hash_str64(id);

	return h ? h : 1;
}

static size_t dedupe_home(const struct dedupe *d, uint64_t h)
{
	return (size_t)(h * 11400714819323198485u >> 20) & (d->nset - 1);
}

static size_t dedupe_find(const struct dedupe *d, uint64_t h)
{
	size_t i = dedupe_home(d, h);

	while (d->set[i] && d->set[i] != h)
		i = (i + 1) & (d->nset - 1);
	return i;
}

/* Backward-shift deletion keeps probe chains intact without tombstones. */
static void dedupe_set_remove(struct dedupe *d, uint64_t h)
{
	size_t i = dedupe_find(d, h), j = i;

	if (!d->set[i])
		return;
	for (;;) {
		size_t k;

		d->set[i] = 0;
		do {
			j = (j + 1) & (d->nset - 1);
			if (!d->set[j])
				return;
			k = dedupe_home(d, d->set[j]);
		} while (i <= j ? (i < k && k <= j) : (i < k || k <= j));
		d->set[i] = d->set[j];
		i = j;
	}
}

struct dedupe *dedupe_new(int64_t window_ms)
{
	struct dedupe *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	d->window_ms = window_ms;
	d->cap = 1024;
	d->nset = 2 * d->cap;
	d->fifo = calloc(d->cap, sizeof(*d->fifo));
	d->set = calloc(d->nset, sizeof(*d->set));
	if (!d->fifo || !d->set) {
		dedupe_free(d);
		return NULL;
	}
	return d;
}

void dedupe_free(struct dedupe *d)
{
	if (!d)
		return;
	free(d->fifo);
	free(d->set);
	free(d);
}

int dedupe_seen(struct dedupe *d, const char *id)
{
	return d->set[dedupe_find(d, dedupe_hash(id))] != 0;
}

static int dedupe_grow(struct dedupe *d)
{
	size_t cap = d->cap * 2, i;
	struct dedupe_item *fifo = malloc(cap * sizeof(*fifo));
	uint64_t *set = calloc(2 * cap, sizeof(*set));

	if (!fifo || !set) {
		free(fifo);
		free(set);
		return -1;
	}
	for (i = 0; i < d->len; i++)
		fifo[i] = d->fifo[(d->head + i) & (d->cap - 1)];
	free(d->fifo);
	free(d->set);
	d->fifo = fifo;
	d->set = set;
	d->head = 0;
	d->cap = cap;
	d->nset = 2 * cap;
	for (i = 0; i < d->len; i++)
		d->set[dedupe_find(d, fifo[i].hash)] = fifo[i].hash;
	return 0;
}

int dedupe_add(struct dedupe *d, const char *id, int64_t now_ms)
{
	uint64_t h = dedupe_hash(id);
	size_t slot;

	if (d->len == d->cap && dedupe_grow(d) < 0)
		return -1;
	slot = dedupe_find(d, h);
	if (d->set[slot])
		return 0;
	d->set[slot] = h;
	d->fifo[(d->head + d->len) & (d->cap - 1)] = (struct dedupe_item){ h, now_ms };
	d->len++;
	return 0;
}

void dedupe_expire(struct dedupe *d, int64_t now_ms)
{
	while (d->len && d->fifo[d->head].at_ms < now_ms - d->window_ms) {
		dedupe_set_remove(d, d->fifo[d->head].hash);
		d->head = (d->head + 1) & (d->cap - 1);
		d->len--;
	}
}
