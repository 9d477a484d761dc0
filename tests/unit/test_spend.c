/* Unit tests of spend: budgets seeded from the rollups the real writer stores, over a
 * month and a day boundary, reported and estimated cost, keys without a budget, a
 * team's from the rows made under it; on
 * SQLite, and on PostgreSQL when TALLY_TEST_PG_URL is set (teststore.h). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>
#include <string.h>

#include "acct.h"
#include "db.h"
#include "keytable-t.h"
#include "probe.h"
#include "queue.h"
#include "quota.h"
#include "spend.h"
#include "teamspend.h"
#include "teststore.h"
#include "tz.h"
#include "tmpdir.h"
#include "unit.h"
#include "usageview.h"
#include "writer.h"

/* 2026-12-15 12:00:00 UTC */
#define NOW_MS      1797336000000LL
#define HOUR_MS     3600000LL
#define DAY_MS      (24 * HOUR_MS)

static int seq;
static enum teststore store_kind;

static void row_at(struct acct_row *r, int64_t key_id, int64_t at_ms, int64_t cost,
                   int64_t estimated_cost)
{
	acct_row_init(r);
	snprintf(r->request_id, sizeof(r->request_id), "spend-%d", seq++);
	snprintf(r->model, sizeof(r->model), "gpt-a");
	snprintf(r->provider, sizeof(r->provider), "oai");
	snprintf(r->verdict, sizeof(r->verdict), "allow");
	r->key_id = key_id;
	r->status = 200;
	r->outcome = estimated_cost >= 0 ? ACCT_CLIENT_ABORT : ACCT_COMPLETE;
	r->started_at_ms = at_ms;
	r->cost_micros = cost;
	r->estimated_cost_micros = estimated_cost;
	r->estimated_tokens = estimated_cost >= 0 ? 10 : ACCT_NONE;
}

/* Stores rows through the writer, as the agent does. */
static void store(const char *path, const struct acct_row *rows, size_t n)
{
	struct queue *q = queue_new(64);
	struct writer_config cfg = { .db_path = path, .queue = q };
	char err[256];
	struct writer *w = writer_start(&cfg, err, sizeof(err));
	size_t i;

	CHECK(w != NULL);
	if (!w)
		goto out;
	for (i = 0; i < n; i++)
		CHECK_EQ_INT(queue_push(q, &rows[i]), 0);
	writer_stop(w);
out:
	queue_free(q);
}

/* Whether key k (under its limits) may spend est more at NOW_MS. */
static int admits(struct quota *q, const struct kt_key *k, int64_t est)
{
	struct quota_hold hold;
	struct quota_status st;
	enum quota_verdict v = quota_admit(q, k->id, &k->quota, 0, est, NOW_MS, &hold, &st);

	if (v == QUOTA_OK)
		quota_settle(q, &hold, 0, 0, NOW_MS);
	return v == QUOTA_OK;
}

/* A whole probe time for the calling thread: what these tests check is what is read,
 * not how long a loaded machine takes to connect (probe.h has its own tests). */
static void full_probe_time(void)
{
	*probe_thread_budget() = (struct probe_budget){ PROBE_US, probe_now_us() };
}

static void test_seed(void)
{
	struct kt_key keys[3] = {
		{ .id = 1, .quota = { .budget_micros = 1000, .period = QUOTA_PERIOD_MONTH } },
		{ .id = 2, .quota = { .budget_micros = 1000, .period = QUOTA_PERIOD_DAY } },
		{ .id = 3 },                                     /* no budget */
	};
	struct kt_team teams[1] = {
		{ .id = 7, .quota = { .budget_micros = 1000, .period = QUOTA_PERIOD_MONTH } },
	};
	struct kt_key team7 = { .id = quota_team_subject(7), .quota = teams[0].quota };
	struct kt_tag_budget tags[1] = {
		{ .id = 9, .tag = "project=atlas",
		  .quota = { .budget_micros = 1000, .period = QUOTA_PERIOD_MONTH } },
	};
	struct kt_key tag9 = { .id = quota_tag_subject(9), .quota = tags[0].quota };
	struct keytable kt = { .keys = keys, .nkeys = 3, .teams = teams, .nteams = 1,
	                       .tag_budgets = tags, .ntag_budgets = 1 };
	struct acct_row rows[10];
	char path[1024], err[256];
	const char *where;
	struct quota *q = quota_new();
	struct db *db = NULL;

	if (tmpdir_make("spend") < 0 || !(where = teststore_fresh(store_kind, "tally.db"))) {
		CHECK(0);
		quota_free(q);
		return;
	}
	snprintf(path, sizeof(path), "%s", where);
	CHECK(db_open(path, DB_CREATE, &db, err, sizeof(err)) == 0);
	/* key 1: 300 reported and 200 estimated this month; 5000 last month */
	row_at(&rows[0], 1, NOW_MS - 13 * DAY_MS, 300, ACCT_NONE);
	row_at(&rows[1], 1, NOW_MS - 2 * HOUR_MS, ACCT_NONE, 200);
	row_at(&rows[2], 1, NOW_MS - 15 * DAY_MS, 5000, ACCT_NONE);
	/* key 2: 900 today (the hour it began in), 5000 yesterday */
	row_at(&rows[3], 2, NOW_MS - 12 * HOUR_MS, 900, ACCT_NONE);
	row_at(&rows[4], 2, NOW_MS - 12 * HOUR_MS - 1, 5000, ACCT_NONE);
	/* key 3, no budget: nothing to seed */
	row_at(&rows[5], 3, NOW_MS - HOUR_MS, 99999, ACCT_NONE);
	/* team 7: what rows made under it spent this month, whatever key made them and
	 * wherever the key is now: key 1's 300 above and 250 of key 3's; 5000 of last
	 * month's and 70 made under team 8 are not its */
	rows[0].team_id = 7;
	row_at(&rows[6], 3, NOW_MS - 3 * HOUR_MS, 200, 50);
	rows[6].team_id = 7;
	row_at(&rows[7], 3, NOW_MS - 20 * DAY_MS, 5000, ACCT_NONE);
	rows[7].team_id = 7;
	row_at(&rows[8], 3, NOW_MS - HOUR_MS, 70, ACCT_NONE);
	rows[8].team_id = 8;
	/* tag project=atlas: the rows carrying it this month, whatever their key (300 and
	 * 250); last month's 5000 and another tag's 70 are not its */
	snprintf(rows[0].tags, sizeof(rows[0].tags), "project=atlas");
	snprintf(rows[6].tags, sizeof(rows[6].tags), "env=x,project=atlas");
	snprintf(rows[7].tags, sizeof(rows[7].tags), "project=atlas");
	snprintf(rows[8].tags, sizeof(rows[8].tags), "project=atlass");
	CHECK(db_exec(db, "INSERT INTO tag_budgets (id, tag, created_at, budget_micros)"
	                  " VALUES (9, 'project=atlas', 1, 1000)", err, sizeof(err)) == 0);
	store(path, rows, 9);

	CHECK_EQ_INT(spend_seed(db, &kt, q, NOW_MS, err, sizeof(err)), 0);
	/* 500 spent of 1000: room for 500, not 501 */
	CHECK(admits(q, &keys[0], 500));
	CHECK(!admits(q, &keys[0], 501));
	/* 900 of 1000 today */
	CHECK(admits(q, &keys[1], 100));
	CHECK(!admits(q, &keys[1], 101));
	CHECK(admits(q, &keys[2], 1000000));
	/* 550 of the team's 1000 this month */
	CHECK(admits(q, &team7, 450));
	CHECK(!admits(q, &team7, 451));
	/* 550 of the tag's 1000 this month */
	CHECK(admits(q, &tag9, 450));
	CHECK(!admits(q, &tag9, 451));
	/* The metrics' figures are the same sums. */
	{
		struct teamspend *ts = teamspend_new();
		struct teamspend_team got[2];

		teams[0].name = "t7";
		CHECK_EQ_INT(teamspend_copy(ts, got, 2), 0);
		CHECK_EQ_INT(teamspend_refresh(ts, db, &kt, NOW_MS, err, sizeof(err)), 0);
		CHECK_EQ_INT(teamspend_copy(ts, got, 2), 1);
		CHECK_EQ_STR(got[0].name, "t7");
		CHECK_EQ_INT(got[0].spent_micros, 550);
		CHECK_EQ_INT(got[0].budget_micros, 1000);
		teamspend_free(ts);
	}
	/* A key's usage reads the same sums, once per USAGEVIEW_FRESH_MS whatever it
	 * asks; a new row shows after that, and a store that fails is a -1, not a 0. */
	{
		struct usageview *u = usageview_new(path);
		int64_t month = quota_period_start(QUOTA_PERIOD_MONTH, NULL, NOW_MS);
		int64_t spent = -1, at = -1;
		struct acct_row more;

		CHECK(u != NULL);
		full_probe_time();
		CHECK_EQ_INT(usageview_spent(u, 1, NULL, month, NOW_MS, &spent, &at), 0);
		CHECK_EQ_INT(spent, 500);
		CHECK_EQ_INT(at, NOW_MS);
		full_probe_time();
		CHECK_EQ_INT(usageview_spent(u, quota_team_subject(7), NULL, month, NOW_MS, &spent, &at), 0);
		CHECK_EQ_INT(spent, 550);
		full_probe_time();
		CHECK_EQ_INT(usageview_spent(u, 3, NULL, month, NOW_MS, &spent, &at), 0);
		CHECK_EQ_INT(spent, 99999 + 250 + 70);
		CHECK_EQ_INT((int64_t)usageview_reads(u), 3);
		row_at(&more, 1, NOW_MS - HOUR_MS, 11, ACCT_NONE);
		store(path, &more, 1);
		full_probe_time();
		CHECK_EQ_INT(usageview_spent(u, 1, NULL, month, NOW_MS + USAGEVIEW_FRESH_MS - 1, &spent, &at), 0);
		CHECK_EQ_INT(spent, 500);
		CHECK_EQ_INT(at, NOW_MS);
		CHECK_EQ_INT((int64_t)usageview_reads(u), 3);
		full_probe_time();
		CHECK_EQ_INT(usageview_spent(u, 1, NULL, month, NOW_MS + USAGEVIEW_FRESH_MS, &spent, &at), 0);
		CHECK_EQ_INT(spent, 511);
		CHECK_EQ_INT((int64_t)usageview_reads(u), 4);
		/* Another period of the same key is another figure. */
		full_probe_time();
		CHECK_EQ_INT(usageview_spent(u, 1, NULL, quota_period_start(QUOTA_PERIOD_DAY, NULL, NOW_MS),
		                             NOW_MS + USAGEVIEW_FRESH_MS, &spent, &at), 0);
		CHECK_EQ_INT(spent, 211);
		CHECK(db_exec(db, "DROP TABLE team_hourly", err, sizeof(err)) == 0);
		CHECK_EQ_INT(usageview_spent(u, quota_team_subject(8), NULL, month, NOW_MS, &spent, &at), -1);
		usageview_free(u);
	}
	/* An unreadable database is an error that names what failed. */
	CHECK(db_exec(db, "DROP TABLE key_hourly", err, sizeof(err)) == 0);
	CHECK_EQ_INT(spend_seed(db, &kt, q, NOW_MS, err, sizeof(err)), -1);
	CHECK(strstr(err, "spend") != NULL);
	db_close(db);
	quota_free(q);
	tmpdir_remove();
}

/* Inserts key id (and its model_budgets' foreign key) with a hash of its own. */
static void add_key(struct db *db, int64_t id)
{
	unsigned char hash[32];
	struct db_stmt *st;
	char name[32];

	memset(hash, (int)id, sizeof(hash));
	snprintf(name, sizeof(name), "k%lld", (long long)id);
	CHECK(db_prepare(db, "INSERT INTO keys (id, name, prefix, hash, created_at)"
	                     " VALUES (?1, ?2, ?2, ?3, 1)", &st) == 0);
	db_bind_int(st, 1, id);
	db_bind_text(st, 2, name, strlen(name));
	db_bind_blob(st, 3, hash, sizeof(hash));
	CHECK(db_step(st) == DB_DONE);
	db_finalize(st);
}

/* Budgets per model: a key's from its rows of the model, of its dated snapshots (unless
 * the key budgets the snapshot by name) and of its -latest alias, this period only; a
 * team's from the rows made under it, whatever key made them. GET /tally/v1/usage reads
 * the same sums, through the share thread's function. */
static void test_seed_model_budgets(void)
{
	struct kt_model_budget kb[2] = {
		{ .id = 1, .key_id = 1, .model = "gpt-a",
		  .quota = { .budget_micros = 1000, .period = QUOTA_PERIOD_MONTH } },
		{ .id = 2, .key_id = 1, .model = "gpt-a-2026-12-01",
		  .quota = { .budget_micros = 1000, .period = QUOTA_PERIOD_DAY } },
	};
	struct kt_model_budget tb[1] = {
		{ .id = 3, .team_id = 7, .model = "gpt-a",
		  .quota = { .budget_micros = 1000, .period = QUOTA_PERIOD_WEEK } },
	};
	struct kt_key keys[2] = { { .id = 1, .model_budgets = kb, .nmodel_budgets = 2 }, { .id = 2 } };
	struct kt_team teams[1] = { { .id = 7, .model_budgets = tb, .nmodel_budgets = 1 } };
	struct kt_key b1 = { .id = quota_key_model_subject(1), .quota = kb[0].quota };
	struct kt_key b2 = { .id = quota_key_model_subject(2), .quota = kb[1].quota };
	struct kt_key b3 = { .id = quota_team_model_subject(3), .quota = tb[0].quota };
	struct keytable kt = { .keys = keys, .nkeys = 2, .teams = teams, .nteams = 1,
	                       .model_budgets = kb, .nmodel_budgets = 2 };
	struct acct_row rows[9];
	char path[1024], err[256];
	const char *where;
	struct quota *q = quota_new();
	struct db *db = NULL;
	int64_t spent = -1;

	if (tmpdir_make("spend") < 0 || !(where = teststore_fresh(store_kind, "tally.db"))) {
		CHECK(0);
		quota_free(q);
		return;
	}
	snprintf(path, sizeof(path), "%s", where);
	CHECK(db_open(path, DB_CREATE, &db, err, sizeof(err)) == 0);
	add_key(db, 1);
	add_key(db, 2);
	CHECK(db_exec(db, "INSERT INTO teams (id, name, created_at) VALUES (7, 't', 1);"
	                  "INSERT INTO model_budgets (id, key_id, team_id, model, created_at,"
	                  " budget_micros, budget_period) VALUES (1, 1, NULL, 'gpt-a', 1, 1000,"
	                  " 'month'), (2, 1, NULL, 'gpt-a-2026-12-01', 1, 1000, 'day'),"
	                  " (3, NULL, 7, 'gpt-a', 1, 1000, 'week')", err, sizeof(err)) == 0);
	/* key 1 this month: gpt-a 100 + 20 estimated, its snapshot gpt-a-2026-12-03 30,
	 * gpt-a-2026-12-01 (budgeted by name) 40 today, gpt-ab 50; last month's gpt-a 5000 */
	row_at(&rows[0], 1, NOW_MS - 10 * DAY_MS, 100, ACCT_NONE);
	row_at(&rows[1], 1, NOW_MS - HOUR_MS, ACCT_NONE, 20);
	row_at(&rows[2], 1, NOW_MS - DAY_MS, 30, ACCT_NONE);
	snprintf(rows[2].model, sizeof(rows[2].model), "gpt-a-2026-12-03");
	row_at(&rows[3], 1, NOW_MS - HOUR_MS, 40, ACCT_NONE);
	snprintf(rows[3].model, sizeof(rows[3].model), "gpt-a-2026-12-01");
	row_at(&rows[4], 1, NOW_MS - HOUR_MS, 50, ACCT_NONE);
	snprintf(rows[4].model, sizeof(rows[4].model), "gpt-ab");
	row_at(&rows[5], 1, NOW_MS - 20 * DAY_MS, 5000, ACCT_NONE);
	/* team 7 this week (since Monday 2026-12-14): key 2's gpt-a 200 and key 1's
	 * snapshot 30 under it; key 2's gpt-a of the week before, and without the team,
	 * are not its */
	row_at(&rows[6], 2, NOW_MS - HOUR_MS, 200, ACCT_NONE);
	rows[6].team_id = 7;
	rows[2].team_id = 7;
	rows[4].team_id = 7;
	row_at(&rows[7], 2, NOW_MS - 3 * DAY_MS, 700, ACCT_NONE);
	rows[7].team_id = 7;
	/* its alias gpt-a-latest, 5 */
	row_at(&rows[8], 1, NOW_MS - HOUR_MS, 5, ACCT_NONE);
	snprintf(rows[8].model, sizeof(rows[8].model), "gpt-a-latest");
	store(path, rows, 9);

	CHECK_EQ_INT(spend_seed(db, &kt, q, NOW_MS, err, sizeof(err)), 0);
	CHECK(admits(q, &b1, 1000 - 155));                  /* 100 + 20 + 30 + 5 */
	CHECK(!admits(q, &b1, 1000 - 155 + 1));
	CHECK(admits(q, &b2, 1000 - 40));
	CHECK(!admits(q, &b2, 1000 - 40 + 1));
	CHECK(admits(q, &b3, 1000 - 230));                  /* 200 + 30 */
	CHECK(!admits(q, &b3, 1000 - 230 + 1));
	/* A key's usage reads the same sums. */
	{
		struct usageview *u = usageview_new(path);
		int64_t at = -1;

		CHECK(u != NULL);
		full_probe_time();
		CHECK_EQ_INT(usageview_spent(u, quota_key_model_subject(1), "gpt-a",
		                             quota_period_start(QUOTA_PERIOD_MONTH, NULL, NOW_MS), NOW_MS,
		                             &spent, &at), 0);
		CHECK_EQ_INT(spent, 155);
		full_probe_time();
		CHECK_EQ_INT(usageview_spent(u, quota_team_model_subject(3), "gpt-a",
		                             quota_period_start(QUOTA_PERIOD_WEEK, NULL, NOW_MS), NOW_MS,
		                             &spent, &at), 0);
		CHECK_EQ_INT(spent, 230);
		/* A model budget's subject without its model is no figure. */
		full_probe_time();
		CHECK_EQ_INT(usageview_spent(u, quota_key_model_subject(2), NULL, 0, NOW_MS, &spent,
		                             &at), -1);
		usageview_free(u);
	}
	db_close(db);
	quota_free(q);
	tmpdir_remove();
}

/* A page of a key's end users: those with rows in the period, in order, each summed over
 * the period's days alone; a page examines at most USAGEVIEW_PAGE_SCAN end users, and
 * says where it stopped when that many had no rows in the period. */
static void test_end_users_page(void)
{
	enum { OLD = USAGEVIEW_PAGE_SCAN + 3 };
	int64_t month = quota_period_start(QUOTA_PERIOD_MONTH, NULL, NOW_MS);
	struct usageview_end_user eu[3];
	struct acct_row rows[32];
	char path[1024], stopped[ACCT_END_USER_MAX], after[ACCT_END_USER_MAX], err[256];
	const char *where;
	struct usageview *u;
	struct db *db = NULL;
	int i, n = 0;

	if (tmpdir_make("endusers") < 0 || !(where = teststore_fresh(store_kind, "tally.db"))) {
		CHECK(0);
		return;
	}
	snprintf(path, sizeof(path), "%s", where);
	CHECK(db_open(path, DB_CREATE, &db, err, sizeof(err)) == 0);
	db_close(db);
	/* key 1: a-now this month (and last), OLD end users last month only, zz-1 and zz-2
	 * this month; key 2's zz-0 is none of key 1's. */
	for (i = 0; i < OLD + 6; i++) {
		struct acct_row *r = &rows[n++];

		if (i < OLD) {
			row_at(r, 1, NOW_MS - 40 * DAY_MS, 1000, ACCT_NONE);
			snprintf(r->end_user, sizeof(r->end_user), "old-%04d", i);
		} else {
			static const struct { int64_t key, ago, cost, est; const char *who; } now[] = {
				{ 1, HOUR_MS, 30, ACCT_NONE, "a-now" },
				{ 1, 40 * DAY_MS, 1000, ACCT_NONE, "a-now" },
				{ 1, HOUR_MS, 5, 7, "zz-1" },
				{ 1, 2 * HOUR_MS, 6, ACCT_NONE, "zz-1" },
				{ 1, HOUR_MS, 9, ACCT_NONE, "zz-2" },
				{ 2, HOUR_MS, 9, ACCT_NONE, "zz-0" },
			};

			row_at(r, now[i - OLD].key, NOW_MS - now[i - OLD].ago, now[i - OLD].cost,
			       now[i - OLD].est);
			snprintf(r->end_user, sizeof(r->end_user), "%s", now[i - OLD].who);
		}
		if (n == 32 || i == OLD + 5) {
			store(path, rows, (size_t)n);
			n = 0;
		}
	}
	u = usageview_new(path);
	CHECK(u != NULL);
	if (!u)
		goto out;
	full_probe_time();
	CHECK_EQ_INT(usageview_end_users(u, 1, month, "", NOW_MS, eu, 3, stopped), 1);
	CHECK_EQ_STR(eu[0].id, "a-now");
	CHECK_EQ_INT(eu[0].requests, 1);
	CHECK_EQ_INT(eu[0].spent, 30);
	snprintf(path, sizeof(path), "old-%04d", USAGEVIEW_PAGE_SCAN - 2);
	CHECK_EQ_STR(stopped, path);
	memcpy(after, stopped, sizeof(after));
	full_probe_time();
	CHECK_EQ_INT(usageview_end_users(u, 1, month, after, NOW_MS, eu, 3, stopped), 2);
	CHECK_EQ_STR(stopped, "");
	CHECK_EQ_STR(eu[0].id, "zz-1");
	CHECK_EQ_INT(eu[0].requests, 2);
	CHECK_EQ_INT(eu[0].spent, 5 + 7 + 6);
	CHECK_EQ_STR(eu[1].id, "zz-2");
	/* A full page stops reading where it is full. */
	full_probe_time();
	CHECK_EQ_INT(usageview_end_users(u, 1, month, "old-0200", NOW_MS, eu, 1, stopped), 1);
	CHECK_EQ_STR(eu[0].id, "zz-1");
	CHECK_EQ_STR(stopped, "");
	/* Every period of them: the total's. */
	full_probe_time();
	CHECK_EQ_INT(usageview_end_users(u, 1, 0, "", NOW_MS, eu, 3, stopped), 3);
	CHECK_EQ_INT(eu[0].requests, 2);
	CHECK_EQ_INT(eu[0].spent, 1030);
	CHECK_EQ_STR(eu[1].id, "old-0000");
	usageview_free(u);
out:
	tmpdir_remove();
}

/* A store that takes a connection and never answers (a partition, a hung server): the
 * thread waits for libpq's connect timeout once, and is then left alone by its retry and
 * its probe time, however often a key asks. Last: the thread's probe time is owed after. */
static void test_usage_store_that_hangs(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	char url[128];
	struct usageview *u;
	int64_t spent, at, t0, waited, now = NOW_MS;
	int i;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(fd, 8) == 0 &&
	      getsockname(fd, (struct sockaddr *)&sa, &len) == 0);
	snprintf(url, sizeof(url), "postgresql://u@127.0.0.1:%d/x?connect_timeout=2",
	         ntohs(sa.sin_port));
	u = usageview_new(url);
	CHECK(u != NULL);
	full_probe_time();
	t0 = probe_now_us();
	CHECK_EQ_INT(usageview_spent(u, 1, NULL, 0, now, &spent, &at), -1);
	waited = probe_now_us() - t0;
	CHECK(waited >= 1500000);                       /* the connect's timeout, once */
	for (i = 0; i < 5; i++) {
		now += waited / 1000 + 1000 * i;            /* the I/O thread's clock moves on */
		t0 = probe_now_us();
		CHECK_EQ_INT(usageview_spent(u, 2 + i, NULL, 0, now, &spent, &at), -1);
		CHECK(probe_now_us() - t0 < 200000);
	}
	usageview_free(u);
	close(fd);
}

/* Budgets whose day begins at a zone's midnight off the hour: a key in Asia/Kolkata
 * (+05:30, its day of NOW_MS began at 18:30Z), a team in Asia/Kathmandu (+05:45, at
 * 18:15Z). The spend counts the rows of the half hour before the first whole hour, the
 * hours after it, and nothing of the minutes before the local midnight. */
static void test_seed_zones(void)
{
	char path[1024], err[256];
	const struct tz *in = tz_get("Asia/Kolkata", err, sizeof(err));
	const struct tz *np = tz_get("Asia/Kathmandu", err, sizeof(err));
	struct kt_key keys[1] = {
		{ .id = 11, .quota = { .budget_micros = 10000, .period = QUOTA_PERIOD_DAY, .tz = in } },
	};
	struct kt_team teams[1] = {
		{ .id = 12, .quota = { .budget_micros = 10000, .period = QUOTA_PERIOD_DAY, .tz = np } },
	};
	struct kt_key team12 = { .id = quota_team_subject(12), .quota = teams[0].quota };
	struct keytable kt = { .keys = keys, .nkeys = 1, .teams = teams, .nteams = 1 };
	int64_t day = NOW_MS - 12 * HOUR_MS;                /* 2026-12-15 00:00Z */
	int64_t in_day = day - 5 * HOUR_MS - HOUR_MS / 2;   /* 2026-12-14 18:30Z */
	int64_t np_day = in_day - HOUR_MS / 4;              /* 2026-12-14 18:15Z */
	struct acct_row rows[8];
	const char *where;
	struct quota *q = quota_new();
	struct db *db = NULL;

	CHECK(in && np);
	if (!in || !np || tmpdir_make("spendtz") < 0 ||
	    !(where = teststore_fresh(store_kind, "tally.db"))) {
		CHECK(0);
		quota_free(q);
		return;
	}
	snprintf(path, sizeof(path), "%s", where);
	CHECK(db_open(path, DB_CREATE, &db, err, sizeof(err)) == 0);
	CHECK_EQ_INT(quota_period_start(QUOTA_PERIOD_DAY, in, NOW_MS), in_day);
	CHECK_EQ_INT(quota_period_start(QUOTA_PERIOD_DAY, np, NOW_MS), np_day);
	/* key 11: 1 + 20 + 300 + 4000 since 18:30Z; the 5000 of 18:29:59.999 are the day
	 * before's, though its hour's */
	row_at(&rows[0], 11, in_day - 1, 5000, ACCT_NONE);
	row_at(&rows[1], 11, in_day, 1, ACCT_NONE);
	row_at(&rows[2], 11, in_day + HOUR_MS / 2 - 1, ACCT_NONE, 20);
	row_at(&rows[3], 11, in_day + HOUR_MS / 2, 300, ACCT_NONE);
	row_at(&rows[4], 11, NOW_MS - 1, 4000, ACCT_NONE);
	/* team 12: 60 + 700 since 18:15Z, not the 8000 of 18:14 */
	row_at(&rows[5], 11, np_day - 60000, 8000, ACCT_NONE);
	row_at(&rows[6], 11, np_day, 60, ACCT_NONE);
	row_at(&rows[7], 11, in_day + HOUR_MS / 2, 700, ACCT_NONE);
	rows[5].team_id = rows[6].team_id = rows[7].team_id = 12;
	store(path, rows, 8);

	CHECK_EQ_INT(spend_seed(db, &kt, q, NOW_MS, err, sizeof(err)), 0);
	/* key 11: 1 + 20 + 300 + 4000 + the team's rows of 18:30 on (700) */
	CHECK(admits(q, &keys[0], 10000 - 5021));
	CHECK(!admits(q, &keys[0], 10000 - 5021 + 1));
	CHECK(admits(q, &team12, 10000 - 760));
	CHECK(!admits(q, &team12, 10000 - 760 + 1));
	db_close(db);
	quota_free(q);
	tmpdir_remove();
}

int main(void)
{
	int i;

	for (i = 0; i < teststore_count(); i++) {
		store_kind = (enum teststore)i;
		printf("store: %s\n", teststore_name(store_kind));
		RUN(test_seed);
		RUN(test_seed_model_budgets);
		RUN(test_end_users_page);
		RUN(test_seed_zones);
	}
	RUN(test_usage_store_that_hangs);
	return UNIT_DONE();
}
