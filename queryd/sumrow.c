/* sumrow: a summary query's rollup row (see sumrow.h). Any thread, on the caller's
 * statement. */
#include "sumrow.h"

#include <stdio.h>
#include <string.h>

#include "satadd.h"

int sumrow_check_columns(struct db_stmt *st, char *err, size_t errlen)
{
	char want[32];
	int i;

	if (db_col_count(st) != SUMROW_COL_SUMS + ROLLUP_SUMS) {
		snprintf(err, errlen, "%d result columns, the summary reads %d",
		         db_col_count(st), SUMROW_COL_SUMS + ROLLUP_SUMS);
		return -1;
	}
	for (i = 0; i < ROLLUP_SUMS; i++) {
		const char *name = db_col_name(st, SUMROW_COL_SUMS + i);

		rollup_column(i, want, sizeof(want));
		if (!name || strcmp(name, want) != 0) {
			snprintf(err, errlen, "result column %d is %s, the summary's is %s",
			         SUMROW_COL_SUMS + i, name ? name : "?", want);
			return -1;
		}
	}
	return 0;
}

void sumrow_read(struct db_stmt *st, struct sumrow_usage *u)
{
	int i;

	for (i = 0; i < ROLLUP_NAMED; i++)
		u->sum[i] = db_col_int(st, SUMROW_COL_SUMS + i);
	for (i = 0; i < LATENCY_BUCKETS; i++)
		u->lat[i] = (uint64_t)db_col_int(st, SUMROW_COL_LAT + i);
}

void sumrow_add(struct sumrow_usage *to, const struct sumrow_usage *u)
{
	int i;

	for (i = 0; i < ROLLUP_NAMED; i++)
		to->sum[i] = satadd(to->sum[i], u->sum[i]);
	for (i = 0; i < LATENCY_BUCKETS; i++)
		to->lat[i] += u->lat[i];
}

void sumrow_sub(struct sumrow_usage *to, const struct sumrow_usage *u)
{
	int i;

	for (i = 0; i < ROLLUP_NAMED; i++)
		to->sum[i] = satadd(to->sum[i], -u->sum[i]);
	for (i = 0; i < LATENCY_BUCKETS; i++)
		to->lat[i] -= u->lat[i];
}
