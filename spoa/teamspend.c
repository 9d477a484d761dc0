/* teamspend: teams' spend for the metrics (see teamspend.h). The reload thread
 * refreshes, the main thread copies. */
#include "teamspend.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "keytable-t.h"
#include "spend.h"

struct teamspend {
	pthread_mutex_t lock;         /* guards what follows */
	struct teamspend_team *teams;
	size_t n;
};

struct teamspend *teamspend_new(void)
{
	struct teamspend *ts = calloc(1, sizeof(*ts));

	if (ts)
		pthread_mutex_init(&ts->lock, NULL);
	return ts;
}

void teamspend_free(struct teamspend *ts)
{
	if (!ts)
		return;
	pthread_mutex_destroy(&ts->lock);
	free(ts->teams);
	free(ts);
}

int teamspend_refresh(struct teamspend *ts, struct db *db, const struct keytable *kt,
                      int64_t now_ms, char *err, size_t errlen)
{
	struct teamspend_team *teams = calloc(kt->nteams + 1, sizeof(*teams)), *old;
	struct db_stmt *st = NULL;
	size_t i;
	int rc = -1;

	if (!teams) {
		snprintf(err, errlen, "teams' spend: out of memory");
		return -1;
	}
	if (db_prepare(db, spend_team_sql, &st) < 0)
		goto out;
	for (i = 0; i < kt->nteams; i++) {
		const struct kt_team *m = &kt->teams[i];
		struct teamspend_team *t = &teams[i];

		snprintf(t->name, sizeof(t->name), "%s", m->name);
		t->budget_micros = m->quota.budget_micros;
		t->period = quota_report_period(&m->quota);
		db_reset(st);
		db_bind_int(st, 1, m->id);
		db_bind_int(st, 2, quota_period_start(t->period, m->quota.tz, now_ms) / 1000);
		if (db_step(st) != DB_ROW)
			goto out;
		t->spent_micros = db_col_int(st, 0);
	}
	pthread_mutex_lock(&ts->lock);
	old = ts->teams;
	ts->teams = teams;
	ts->n = kt->nteams;
	pthread_mutex_unlock(&ts->lock);
	teams = old;
	rc = 0;
out:
	if (rc < 0)
		snprintf(err, errlen, "cannot read the teams' spend: %s", db_errmsg(db));
	db_finalize(st);
	free(teams);
	return rc;
}

size_t teamspend_copy(struct teamspend *ts, struct teamspend_team *out, size_t cap)
{
	size_t n;

	pthread_mutex_lock(&ts->lock);
	n = ts->n;
	if (cap && n)
		memcpy(out, ts->teams, (n < cap ? n : cap) * sizeof(*out));
	pthread_mutex_unlock(&ts->lock);
	return n;
}
