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
	struct keytable kt = { .keys = keys, .nkeys = 3, .teams = teams, .nteams = 1 };
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
		int64_t month = quota_period_start(QUOTA_PERIOD_MONTH, NOW_MS);
		int64_t spent = -1, at = -1;
		struct acct_row more;

		CHECK(u != NULL);
		CHECK_EQ_INT(usageview_spent(u, 1, month, NOW_MS, &spent, &at), 0);
		CHECK_EQ_INT(spent, 500);
		CHECK_EQ_INT(at, NOW_MS);
		CHECK_EQ_INT(usageview_spent(u, quota_team_subject(7), month, NOW_MS, &spent, &at), 0);
		CHECK_EQ_INT(spent, 550);
		CHECK_EQ_INT(usageview_spent(u, 3, month, NOW_MS, &spent, &at), 0);
		CHECK_EQ_INT(spent, 99999 + 250 + 70);
		CHECK_EQ_INT((int64_t)usageview_reads(u), 3);
		row_at(&more, 1, NOW_MS - HOUR_MS, 11, ACCT_NONE);
		store(path, &more, 1);
		CHECK_EQ_INT(usageview_spent(u, 1, month, NOW_MS + USAGEVIEW_FRESH_MS - 1, &spent, &at), 0);
		CHECK_EQ_INT(spent, 500);
		CHECK_EQ_INT(at, NOW_MS);
		CHECK_EQ_INT((int64_t)usageview_reads(u), 3);
		CHECK_EQ_INT(usageview_spent(u, 1, month, NOW_MS + USAGEVIEW_FRESH_MS, &spent, &at), 0);
		CHECK_EQ_INT(spent, 511);
		CHECK_EQ_INT((int64_t)usageview_reads(u), 4);
		/* Another period of the same key is another figure. */
		CHECK_EQ_INT(usageview_spent(u, 1, quota_period_start(QUOTA_PERIOD_DAY, NOW_MS),
		                             NOW_MS + USAGEVIEW_FRESH_MS, &spent, &at), 0);
		CHECK_EQ_INT(spent, 211);
		CHECK(db_exec(db, "DROP TABLE team_hourly", err, sizeof(err)) == 0);
		CHECK_EQ_INT(usageview_spent(u, quota_team_subject(8), month, NOW_MS, &spent, &at), -1);
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
	t0 = probe_now_us();
	CHECK_EQ_INT(usageview_spent(u, 1, 0, now, &spent, &at), -1);
	waited = probe_now_us() - t0;
	CHECK(waited >= 1500000);                       /* the connect's timeout, once */
	for (i = 0; i < 5; i++) {
		now += waited / 1000 + 1000 * i;            /* the I/O thread's clock moves on */
		t0 = probe_now_us();
		CHECK_EQ_INT(usageview_spent(u, 2 + i, 0, now, &spent, &at), -1);
		CHECK(probe_now_us() - t0 < 200000);
	}
	usageview_free(u);
	close(fd);
}

int main(void)
{
	int i;

	for (i = 0; i < teststore_count(); i++) {
		store_kind = (enum teststore)i;
		printf("store: %s\n", teststore_name(store_kind));
		RUN(test_seed);
	}
	RUN(test_usage_store_that_hangs);
	return UNIT_DONE();
}
