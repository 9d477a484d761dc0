/* spend: budgets seeded from the rollups (see spend.h). Main thread. */
#include "spend.h"

#include <stdio.h>

#include "quota.h"

int spend_seed(sqlite3 *db, const struct keytable *kt, struct quota *q, int64_t now_ms,
               char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	size_t i;
	int rc = -1;

	if (sqlite3_prepare_v2(db, "SELECT coalesce(sum(cost_micros + estimated_cost_micros), 0)"
	                           " FROM usage_hourly WHERE key_id = ?1 AND hour >= ?2", -1, &st,
	                       NULL) != SQLITE_OK)
		goto out;
	for (i = 0; i < kt->nkeys; i++) {
		const struct kt_key *k = &kt->keys[i];
		int64_t start = quota_period_start(k->quota.period, now_ms);

		if (!k->quota.budget_micros)
			continue;
		sqlite3_reset(st);
		sqlite3_bind_int64(st, 1, k->id);
		sqlite3_bind_int64(st, 2, start / 1000);
		if (sqlite3_step(st) != SQLITE_ROW)
			goto out;
		quota_set_spent(q, k->id, k->quota.period, start, sqlite3_column_int64(st, 0));
	}
	rc = 0;
out:
	if (rc < 0)
		snprintf(err, errlen, "cannot read spend so far: %s", sqlite3_errmsg(db));
	sqlite3_finalize(st);
	return rc;
}
