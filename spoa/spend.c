/* spend: budgets seeded from the rollups (see spend.h). Main thread, then reload's. */
#include "spend.h"

#include <stdio.h>

#include "db.h"
#include "quota.h"

int spend_seed(struct db *db, const struct keytable *kt, struct quota *q, int64_t now_ms,
               char *err, size_t errlen)
{
	struct db_stmt *st = NULL;
	size_t i;
	int rc = -1;

	if (db_prepare(db, "SELECT coalesce(sum(cost_micros + estimated_cost_micros), 0)"
	                   " FROM usage_hourly WHERE key_id = ?1 AND hour >= ?2", &st) < 0)
		goto out;
	for (i = 0; i < kt->nkeys; i++) {
		const struct kt_key *k = &kt->keys[i];
		int64_t start = quota_period_start(k->quota.period, now_ms);

		if (!k->quota.budget_micros)
			continue;
		db_reset(st);
		db_bind_int(st, 1, k->id);
		db_bind_int(st, 2, start / 1000);
		if (db_step(st) != DB_ROW)
			goto out;
		quota_set_spent(q, k->id, k->quota.period, start, db_col_int(st, 0));
	}
	rc = 0;
out:
	if (rc < 0)
		snprintf(err, errlen, "cannot read spend so far: %s", db_errmsg(db));
	db_finalize(st);
	return rc;
}
