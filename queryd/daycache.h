/* daycache: the sums of a summary by key's days that queryd keeps between requests
 * (api.c, sql/queries/summary_keys.sql), with the fingerprint of the rollup rows they
 * came from: a few entries, the least recently used dropped first. One cache per
 * process (queryd serves one store); any request thread, under one mutex. */
#ifndef QUERYD_DAYCACHE_H
#define QUERYD_DAYCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "latency.h"
#include "rollup.h"

#define DAYCACHE_ENTRIES 4
/* Rows of all entries together: 4096 of 136 bytes (272 when a value needs 64 bits),
 * 0.5-1.1 MB at most (a 30-day summary by key of the 10M bench keeps ~200). An entry
 * with more is not kept. */
#define DAYCACHE_ROWS_MAX 4096
/* Values of a kept row: its id, the named sums, the latency buckets. */
#define DAYCACHE_VALUES (1 + ROLLUP_NAMED + LATENCY_BUCKETS)

/* What shapes the kept sums: the days [day_from, day_to) of key_daily, and the key
 * filter (has_key_id, key_id; key_id 0 without one). */
struct daycache_key {
	int64_t day_from, day_to;
	int has_key_id;
	int64_t key_id;
};

/* The sums of one group of the days: id is the key, or with a key filter the day. What
 * daycache_pack takes and daycache_row_at gives back. */
struct daycache_row {
	int64_t id;
	int64_t sum[ROLLUP_NAMED];
	uint64_t lat[LATENCY_BUCKETS];
};

/* The days' sums and the fingerprint of the key_daily rows they were read from, in the
 * same snapshot: count of rows, sum of requests, the table's file (PostgreSQL's
 * relfilenode, 0 on SQLite). The rows are packed in one block, n rows of
 * DAYCACHE_VALUES: uint32_t when every value fits (half the bytes: queryd's RSS is
 * budgeted, docs/performance.md), else uint64_t. */
struct daycache_entry {
	struct daycache_key key;
	int64_t fp_rows, fp_requests, fp_file;
	void *cells;
	size_t n;
	int narrow;
};

/* Packs rows[0..n) into e's cells (any former ones freed): 0, or -1 out of memory. */
int daycache_pack(struct daycache_entry *e, const struct daycache_row *rows, size_t n);

/* Row i (< e->n) of e, unpacked into *out. */
void daycache_row_at(const struct daycache_entry *e, size_t i, struct daycache_row *out);

/* A copy of the entry for k in *out (the caller frees it with daycache_entry_free):
 * 1, or 0 when none is kept (*out empty), -1 out of memory. */
int daycache_get(const struct daycache_key *k, struct daycache_entry *out);

/* Keeps e (its cells are taken: e is left empty), in place of an entry with the same
 * key, else of the least recently used; then drops the least recently used others
 * while all rows exceed DAYCACHE_ROWS_MAX. */
void daycache_put(struct daycache_entry *e);

void daycache_entry_free(struct daycache_entry *e);

/* Drops every entry (at exit, so that leak checkers see none). */
void daycache_clear(void);

#endif
