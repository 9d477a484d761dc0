/* sumrow: the rollup row every summary query selects (sql/queries/summary*.sql): the
 * group key, then rollup.h's summed columns, checked at start (conn.c); and the sums of
 * one such row. Any thread, on the statement it is given. */
#ifndef QUERYD_SUMROW_H
#define QUERYD_SUMROW_H

#include <stddef.h>
#include <stdint.h>

#include "db.h"
#include "latency.h"
#include "rollup.h"

#define SUMROW_COL_T 0
#define SUMROW_COL_KEY 1
#define SUMROW_COL_MODEL 2
#define SUMROW_COL_PROVIDER 3
#define SUMROW_COL_PART SUMROW_COL_MODEL   /* summary_keys: the part of the answer */
/* summary_end_users and summary_tags, which rank their groups themselves: the end user
 * or tag in model's place, the part of the answer in provider's */
#define SUMROW_COL_RANKED_NAME SUMROW_COL_MODEL
#define SUMROW_COL_RANKED_PART SUMROW_COL_PROVIDER
#define SUMROW_COL_SUMS 4
#define SUMROW_COL_LAT (SUMROW_COL_SUMS + ROLLUP_NAMED)

/* The sums of a row, a group or the totals. */
struct sumrow_usage {
	int64_t sum[ROLLUP_NAMED];
	uint64_t lat[LATENCY_BUCKETS];
};

/* 0 if a summary statement's result columns are those read here (the sums by name,
 * the latency buckets by count), else -1 with a message. */
int sumrow_check_columns(struct db_stmt *st, char *err, size_t errlen);

/* The sums of the rollup row under st. */
void sumrow_read(struct db_stmt *st, struct sumrow_usage *u);

/* Adds u to to (sums saturating); subtracts it (what is subtracted was added before,
 * so no bucket ends below 0). */
void sumrow_add(struct sumrow_usage *to, const struct sumrow_usage *u);
void sumrow_sub(struct sumrow_usage *to, const struct sumrow_usage *u);

#endif
