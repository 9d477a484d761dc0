/* spend: budgets seeded from the rollups (see spend.h). Main thread, then reload's. */
#include "spend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "keytable.h"
#include "modelbudget.h"
#include "quota.h"

/* A key's or team's spend since ?2 (unix seconds): its hourly rollup from the first
 * whole hour on, and its rows before that hour, which a period beginning at a zone's
 * midnight off the hour (+05:30, +05:45) starts inside of; an empty range otherwise. */
#define SPEND_SINCE_SQL(rollup, col, rows_where)                                           \
	"SELECT coalesce((SELECT sum(cost_micros + estimated_cost_micros) FROM " rollup        \
	" WHERE " col " = ?1 AND hour >= ?2), 0) + coalesce((SELECT"                            \
	" sum(coalesce(cost_micros, 0) + coalesce(estimated_cost_micros, 0)) FROM requests"     \
	" WHERE " rows_where " AND started_at >= ?2 * 1000"                                    \
	" AND started_at < (?2 + 3599) / 3600 * 3600000), 0)"
const char spend_key_sql[] = SPEND_SINCE_SQL("key_hourly", "key_id", "key_id = ?1");
const char spend_team_sql[] = SPEND_SINCE_SQL("team_hourly", "team_id",
                                              "team_id = ?1 AND team_id IS NOT NULL");

/* tag_total_daily counts whole days, as tag budgets' periods begin on UTC days, across
 * keys: a row a day, however many keys carry the tag. */
const char spend_tag_sql[] = "SELECT coalesce(sum(cost_micros + estimated_cost_micros), 0)"
                             " FROM tag_total_daily WHERE tag = (SELECT tag FROM tag_budgets"
                             " WHERE id = ?1) AND day >= ?2";

const char spend_end_user_sql[] = "SELECT coalesce(sum(cost_micros + estimated_cost_micros), 0)"
                                  " FROM end_user_daily WHERE key_id = ?1 AND day >= ?2"
                                  " AND end_user = ?3";

/* The models the owner of a model budget budgets (?1 model_budgets.id): key_id or
 * team_id, whichever is not NULL, matches. */
const char spend_model_names_sql[] = "SELECT o.model FROM model_budgets b JOIN model_budgets o"
                                     " ON o.key_id = b.key_id OR o.team_id = b.team_id"
                                     " WHERE b.id = ?1";
const char spend_key_model_sql[] =
	"SELECT u.model, sum(u.cost_micros + u.estimated_cost_micros)"
	" FROM model_budgets b JOIN usage_daily u ON u.key_id = b.key_id"
	" WHERE b.id = ?1 AND u.day >= ?2 GROUP BY u.model";
const char spend_team_model_sql[] =
	"SELECT u.model, sum(u.cost_micros + u.estimated_cost_micros)"
	" FROM model_budgets b JOIN team_model_daily u ON u.team_id = b.team_id"
	" WHERE b.id = ?1 AND u.day >= ?2 GROUP BY u.model";

/* Appends name to the n budgets of *b (cap *cap); 0, or -1 out of memory. */
static int spend_name_add(struct kt_model_budget **b, size_t *n, size_t *cap, const char *name)
{
	if (*n == *cap) {
		size_t c = *cap ? 2 * *cap : MODELBUDGET_PER_OWNER_MAX;
		struct kt_model_budget *p = realloc(*b, c * sizeof(*p));

		if (!p)
			return -1;
		*b = p;
		*cap = c;
	}
	memset(&(*b)[*n], 0, sizeof(**b));
	if (!((*b)[*n].model = strdup(name)))
		return -1;
	(*n)++;
	return 0;
}

/* spend_model_sum's rows, its owner's budgets owned[0..n) known. */
static int spend_model_rows(struct db_stmt *rows, const struct kt_model_budget *owned, size_t n,
                            int64_t budget_id, const char *model, int64_t since_s, int64_t *out)
{
	enum db_status rc;

	*out = 0;
	db_bind_int(rows, 1, budget_id);
	db_bind_int(rows, 2, since_s);
	while ((rc = db_step(rows)) == DB_ROW) {
		const char *name = db_col_text(rows, 0);
		const struct kt_model_budget *b = keytable_model_budget(owned, n, name ? name : "");

		if (b && strcmp(b->model, model) == 0)
			*out += db_col_int(rows, 1);
	}
	db_reset(rows);
	return rc == DB_DONE ? 0 : -1;
}

int spend_model_sum(struct db_stmt *names, struct db_stmt *rows, int64_t budget_id,
                    const char *model, int64_t since_s, int64_t *out)
{
	struct kt_model_budget *owned = NULL;
	size_t n = 0, cap = 0, i;
	enum db_status rc;
	int ret = -1;

	db_bind_int(names, 1, budget_id);
	while ((rc = db_step(names)) == DB_ROW)
		if (spend_name_add(&owned, &n, &cap, db_col_text(names, 0) ? db_col_text(names, 0) : "") < 0)
			goto out;
	if (rc == DB_DONE)
		ret = spend_model_rows(rows, owned, n, budget_id, model, since_s, out);
out:
	db_reset(names);
	db_reset(rows);
	for (i = 0; i < n; i++)
		free(owned[i].model);
	free(owned);
	return ret;
}

/* Seeds the model budgets b[0..n) (a key's or a team's, all of its owner's: the snapshot
 * knows them) from rows (spend_*_model_sql). */
static int spend_models(struct db_stmt *rows, struct quota *q, const struct kt_model_budget *b,
                        size_t n, int64_t (*subject)(int64_t), int64_t now_ms)
{
	size_t i;

	for (i = 0; i < n; i++) {
		int64_t start = quota_period_start(b[i].quota.period, b[i].quota.tz, now_ms), spent;

		if (spend_model_rows(rows, b, n, b[i].id, b[i].model, start / 1000, &spent) < 0)
			return -1;
		quota_set_spent(q, subject(b[i].id), b[i].quota.period, b[i].quota.tz,
		                b[i].quota.generation, start, spent);
	}
	return 0;
}

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
		int64_t start = quota_period_start(kinds[i], NULL, now_ms);

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
				                kinds[i], NULL, cfg->generation, start, db_col_int(st, 1));
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
	int64_t start = quota_period_start(cfg->period, cfg->tz, now_ms);

	if (!cfg->budget_micros)
		return 0;
	db_reset(st);
	db_bind_int(st, 1, id);
	db_bind_int(st, 2, start / 1000);
	if (db_step(st) != DB_ROW)
		return -1;
	quota_set_spent(q, subject, cfg->period, cfg->tz, cfg->generation, start,
	                db_col_int(st, 0));
	return 0;
}

int spend_seed(struct db *db, const struct keytable *kt, struct quota *q, int64_t now_ms,
               char *err, size_t errlen)
{
	struct db_stmt *keys = NULL, *teams = NULL, *tags = NULL, *users = NULL;
	struct db_stmt *key_models = NULL, *team_models = NULL;
	size_t i;
	int rc = -1;

	if (db_prepare(db, spend_key_sql, &keys) < 0 || db_prepare(db, spend_team_sql, &teams) < 0 ||
	    db_prepare(db, spend_tag_sql, &tags) < 0 || db_prepare(db, spend_end_users_sql, &users) < 0 ||
	    db_prepare(db, spend_key_model_sql, &key_models) < 0 ||
	    db_prepare(db, spend_team_model_sql, &team_models) < 0)
		goto out;
	for (i = 0; i < kt->nkeys; i++)
		if (spend_models(key_models, q, kt->keys[i].model_budgets,
		                 kt->keys[i].nmodel_budgets, quota_key_model_subject, now_ms) < 0)
			goto out;
	for (i = 0; i < kt->nteams; i++)
		if (spend_models(team_models, q, kt->teams[i].model_budgets,
		                 kt->teams[i].nmodel_budgets, quota_team_model_subject, now_ms) < 0)
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
	db_finalize(key_models);
	db_finalize(team_models);
	return rc;
}
