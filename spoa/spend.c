/* spend: budgets seeded from the rollups (see spend.h). Main thread, then reload's. */
#include "spend.h"

#include <stdio.h>
#include <string.h>

#include "db.h"
#include "keytable.h"
#include "quota.h"

const char spend_key_sql[] = "SELECT coalesce(sum(cost_micros + estimated_cost_micros), 0)"
                             " FROM key_hourly WHERE key_id = ?1 AND hour >= ?2";
const char spend_team_sql[] = "SELECT coalesce(sum(cost_micros + estimated_cost_micros), 0)"
                              " FROM team_hourly WHERE team_id = ?1 AND hour >= ?2";

/* tag_daily counts whole days, as tag budgets' periods begin on UTC days. */
const char spend_tag_sql[] = "SELECT coalesce(sum(cost_micros + estimated_cost_micros), 0)"
                             " FROM tag_daily WHERE tag = (SELECT tag FROM tag_budgets"
                             " WHERE id = ?1) AND day >= ?2";

const char spend_end_user_sql[] = "SELECT coalesce(sum(cost_micros + estimated_cost_micros), 0)"
                                  " FROM end_user_daily WHERE key_id = ?1 AND day >= ?2"
                                  " AND end_user = ?3";

/* What each end user of a key spent since a day (?1 keys.id, ?2 unix seconds). */
static const char spend_end_users_sql[] = "SELECT end_user, sum(cost_micros + estimated_cost_micros)"
                                          " FROM end_user_daily WHERE key_id = ?1 AND day >= ?2"
                                          " GROUP BY end_user";

/* Seeds the budgets of k's end users: for each kind of period its rows budget, what
 * each end user spent since its start, kept for those whose budget has that period. */
static int spend_end_users(struct db_stmt *st, const struct keytable *kt, const struct kt_key *k,
                           struct quota *q, int64_t now_ms)
{
	static const enum quota_period kinds[] = { QUOTA_PERIOD_DAY, QUOTA_PERIOD_WEEK,
	                                           QUOTA_PERIOD_MONTH, QUOTA_PERIOD_TOTAL };
	enum db_status rc;
	size_t i;

	for (i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		int64_t start = quota_period_start(kinds[i], now_ms);

		if (!(k->end_user_budgets & 1u << kinds[i]))
			continue;
		db_reset(st);
		db_bind_int(st, 1, k->id);
		db_bind_int(st, 2, start / 1000);
		while ((rc = db_step(st)) == DB_ROW) {
			const char *user = db_col_text(st, 0);
			size_t len = user ? strlen(user) : 0;
			const struct quota_cfg *cfg = keytable_end_user_limits(kt, k, user, len);

			if (cfg && cfg->budget_micros > 0 && cfg->period == kinds[i])
				quota_set_spent(q, keytable_end_user_subject(kt, k->id, user, len),
				                kinds[i], start, db_col_int(st, 1));
		}
		if (rc != DB_DONE)
			return -1;
	}
	return 0;
}

/* Seeds the limits of subject (quota.h's id: a key's, or a team's negated) with what
 * st, a sum by id and hour, reads for id since its period's start. */
static int spend_one(struct db_stmt *st, struct quota *q, int64_t id, int64_t subject,
                     const struct quota_cfg *cfg, int64_t now_ms)
{
	int64_t start = quota_period_start(cfg->period, now_ms);

	if (!cfg->budget_micros)
		return 0;
	db_reset(st);
	db_bind_int(st, 1, id);
	db_bind_int(st, 2, start / 1000);
	if (db_step(st) != DB_ROW)
		return -1;
	quota_set_spent(q, subject, cfg->period, start, db_col_int(st, 0));
	return 0;
}

int spend_seed(struct db *db, const struct keytable *kt, struct quota *q, int64_t now_ms,
               char *err, size_t errlen)
{
	struct db_stmt *keys = NULL, *teams = NULL, *tags = NULL, *users = NULL;
	size_t i;
	int rc = -1;

	if (db_prepare(db, spend_key_sql, &keys) < 0 || db_prepare(db, spend_team_sql, &teams) < 0 ||
	    db_prepare(db, spend_tag_sql, &tags) < 0 || db_prepare(db, spend_end_users_sql, &users) < 0)
		goto out;
	for (i = 0; i < kt->nkeys; i++)
		if (spend_one(keys, q, kt->keys[i].id, kt->keys[i].id, &kt->keys[i].quota, now_ms) < 0)
			goto out;
	for (i = 0; i < kt->nteams; i++)
		if (spend_one(teams, q, kt->teams[i].id, quota_team_subject(kt->teams[i].id),
		              &kt->teams[i].quota, now_ms) < 0)
			goto out;
	for (i = 0; i < kt->ntag_budgets; i++)
		if (spend_one(tags, q, kt->tag_budgets[i].id, quota_tag_subject(kt->tag_budgets[i].id),
		              &kt->tag_budgets[i].quota, now_ms) < 0)
			goto out;
	for (i = 0; i < kt->nkeys; i++)
		if (kt->keys[i].end_user_budgets &&
		    spend_end_users(users, kt, &kt->keys[i], q, now_ms) < 0)
			goto out;
	rc = 0;
out:
	if (rc < 0)
		snprintf(err, errlen, "cannot read spend so far: %s", db_errmsg(db));
	db_finalize(keys);
	db_finalize(teams);
	db_finalize(tags);
	db_finalize(users);
	return rc;
}
