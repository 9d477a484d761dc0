/* Unit tests for spoa/quota.c: each limit alone and combined, refill over simulated
 * time, reservations settled above and below the estimate, concurrency slots, budgets
 * across day and month boundaries, live limit changes, oversized and absurd inputs,
 * the x-ratelimit figures, many keys, threads admitting against one key, and a key's
 * team admitting with it. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "quota.h"
#include "tz.h"
#include "unit.h"

#define T0     1700000000000LL         /* 2023-11-14T22:13:20Z */
#define DAY    86400000LL
#define BIG    1000000000000000LL      /* 1e15, the largest limit */

static struct quota_cfg cfg_of(int64_t rpm, int64_t tpm, int64_t conc, int64_t budget,
                                enum quota_period p)
{
	struct quota_cfg c = { rpm, tpm, conc, budget, p, NULL, 0 };

	return c;
}

/* Unix ms of a UTC date and time, through libc as an independent reference. */
static int64_t utc_ms(int y, int mon, int d, int h, int mi, int s)
{
	struct tm tm;

	memset(&tm, 0, sizeof(tm));
	tm.tm_year = y - 1900;
	tm.tm_mon = mon - 1;
	tm.tm_mday = d;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = s;
	return (int64_t)timegm(&tm) * 1000;
}

/* Admits and returns the verdict, for checks that need no hold. */
/* Copies file from to to: 0, or -1. */
static int test_copy(const char *from, const char *to)
{
	FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
	char buf[4096];
	size_t n;
	int rc = in && out ? 0 : -1;

	while (rc == 0 && (n = fread(buf, 1, sizeof(buf), in)) > 0)
		rc = fwrite(buf, 1, n, out) == n ? 0 : -1;
	if (out && fclose(out) != 0)
		rc = -1;
	if (in)
		fclose(in);
	return rc;
}

static enum quota_verdict admit(struct quota *l, int64_t key, const struct quota_cfg *c,
                                 int64_t tokens, int64_t cost, int64_t now)
{
	struct quota_hold h;
	struct quota_status st;

	return quota_admit(l, key, c, tokens, cost, now, &h, &st);
}

static void test_unlimited(void)
{
	struct quota *l = quota_new();
	struct quota_cfg none = cfg_of(0, 0, 0, 0, QUOTA_PERIOD_DAY);
	struct quota_cfg rpm = cfg_of(1, 0, 0, 0, QUOTA_PERIOD_DAY);
	struct quota_hold h;
	struct quota_status st;
	int i;

	for (i = 0; i < 1000; i++)
		CHECK_EQ_INT(quota_admit(l, 1, &none, 1000, 1000, T0, &h, &st), QUOTA_OK);
	CHECK_EQ_INT(h.key_id, 0);
	CHECK_EQ_INT(h.concurrent, 0);
	CHECK_EQ_INT(st.limit_requests, -1);
	CHECK_EQ_INT(st.remaining_tokens, -1);
	CHECK_EQ_INT(st.reset_tokens_ms, -1);
	CHECK_EQ_INT(st.retry_after_s, 0);
	quota_settle(l, &h, 5, 5, T0);
	/* No key: nothing to hold even under limits. */
	CHECK_EQ_INT(quota_admit(l, 0, &rpm, 1, 1, T0, &h, &st), QUOTA_OK);
	CHECK_EQ_INT(quota_admit(l, 0, &rpm, 1, 1, T0, &h, &st), QUOTA_OK);
	CHECK_EQ_INT(h.key_id, 0);
	CHECK_EQ_STR(quota_verdict_name(QUOTA_OK), "ok");
	CHECK_EQ_STR(quota_verdict_name(QUOTA_RPM), "rpm");
	CHECK_EQ_STR(quota_verdict_name(QUOTA_TPM), "tpm");
	CHECK_EQ_STR(quota_verdict_name(QUOTA_CONCURRENCY), "concurrency");
	CHECK_EQ_STR(quota_verdict_name(QUOTA_BUDGET), "budget");
	quota_free(l);
	quota_free(NULL);
}

static void test_rpm(void)
{
	struct quota *l = quota_new();
	struct quota_cfg c = cfg_of(3, 0, 0, 0, QUOTA_PERIOD_DAY);
	struct quota_hold h[3], x;
	struct quota_status st;
	int i;

	for (i = 0; i < 3; i++) {
		CHECK_EQ_INT(quota_admit(l, 7, &c, 10, 10, T0, &h[i], &st), QUOTA_OK);
		CHECK_EQ_INT(h[i].key_id, 7);
		CHECK_EQ_INT(h[i].tokens, 0);
		CHECK_EQ_INT(h[i].cost_micros, 0);
		CHECK_EQ_INT(st.remaining_requests, 2 - i);
	}
	CHECK_EQ_INT(quota_admit(l, 7, &c, 10, 10, T0, &x, &st), QUOTA_RPM);
	CHECK_EQ_INT(x.key_id, 0);
	CHECK_EQ_INT(st.limit_requests, 3);
	CHECK_EQ_INT(st.remaining_requests, 0);
	CHECK_EQ_INT(st.reset_requests_ms, 60000);
	CHECK_EQ_INT(st.limit_tokens, -1);
	CHECK_EQ_INT(st.retry_after_s, 20);     /* 3 per minute: one every 20 s */
	/* Settling gives no request back. */
	for (i = 0; i < 3; i++)
		quota_settle(l, &h[i], 10, 10, T0 + 1);
	CHECK_EQ_INT(admit(l, 7, &c, 0, 0, T0 + 19999), QUOTA_RPM);
	CHECK_EQ_INT(admit(l, 7, &c, 0, 0, T0 + 20000), QUOTA_OK);
	CHECK_EQ_INT(admit(l, 7, &c, 0, 0, T0 + 20000), QUOTA_RPM);
	/* Another key is not affected. */
	CHECK_EQ_INT(admit(l, 8, &c, 0, 0, T0), QUOTA_OK);
	/* Long idle refills to the limit, no further. */
	for (i = 0; i < 3; i++)
		CHECK_EQ_INT(admit(l, 7, &c, 0, 0, T0 + 10 * DAY), QUOTA_OK);
	CHECK_EQ_INT(admit(l, 7, &c, 0, 0, T0 + 10 * DAY), QUOTA_RPM);
	quota_free(l);
}

/* Sliding bound: over 3 simulated minutes at one attempt per 10 ms, no 60 s window
 * admits more than 2 x rpm, and the total is rpm (initial bucket) + rpm per minute. */
static void test_rpm_bound(void)
{
	struct quota *l = quota_new();
	struct quota_cfg c = cfg_of(100, 0, 0, 0, QUOTA_PERIOD_DAY);
	static int64_t at[1000];
	int n = 0, i, j;
	int64_t t;

	for (t = 0; t < 180000 && n < 1000; t += 10)
		if (admit(l, 1, &c, 0, 0, T0 + t) == QUOTA_OK)
			at[n++] = t;
	CHECK_EQ_INT(n, 100 + 300 - 1);        /* the 300th refill completes at 180000 */
	for (i = 0, j = 0; i < n; i++) {
		while (at[i] - at[j] >= 60000)
			j++;
		CHECK(i - j + 1 <= 200);
	}
	quota_free(l);
}

static void test_tpm(void)
{
	struct quota *l = quota_new();
	struct quota_cfg c = cfg_of(0, 1000, 0, 0, QUOTA_PERIOD_DAY);
	struct quota_hold h;
	struct quota_status st;

	CHECK_EQ_INT(quota_admit(l, 1, &c, 600, 0, T0, &h, &st), QUOTA_OK);
	CHECK_EQ_INT(h.tokens, 600);
	CHECK_EQ_INT(st.limit_tokens, 1000);
	CHECK_EQ_INT(st.remaining_tokens, 400);
	CHECK_EQ_INT(st.reset_tokens_ms, 36000);
	CHECK_EQ_INT(st.limit_requests, -1);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 500, 0, T0, &h, &st), QUOTA_TPM);
	CHECK_EQ_INT(st.retry_after_s, 6);       /* 100 tokens at 1000/min */
	CHECK_EQ_INT(st.remaining_tokens, 400);  /* a refusal reserves nothing */
	CHECK_EQ_INT(admit(l, 1, &c, 400, 0, T0), QUOTA_OK);
	/* Even a request estimated at 0 tokens needs one. */
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 0, T0, &h, &st), QUOTA_TPM);
	CHECK_EQ_INT(st.retry_after_s, 1);
	CHECK_EQ_INT(admit(l, 1, &c, 0, 0, T0 + 59), QUOTA_TPM);
	CHECK_EQ_INT(admit(l, 1, &c, 0, 0, T0 + 60), QUOTA_OK);
	CHECK_EQ_INT(admit(l, 1, &c, 1000, 0, T0 + 59999), QUOTA_TPM);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 1000, 0, T0 + 60000, &h, &st), QUOTA_OK);
	CHECK_EQ_INT(st.remaining_tokens, 0);
	quota_free(l);
}

static void test_settle_tokens(void)
{
	struct quota *l = quota_new();
	struct quota_cfg c = cfg_of(0, 1000, 0, 0, QUOTA_PERIOD_DAY);
	struct quota_hold h;
	struct quota_status st;

	/* Under-estimate: the overshoot becomes debt that delays later requests. */
	CHECK_EQ_INT(quota_admit(l, 1, &c, 100, 0, T0, &h, &st), QUOTA_OK);
	quota_settle(l, &h, 1100, -1, T0);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 1, 0, T0, &h, &st), QUOTA_TPM);
	CHECK_EQ_INT(st.remaining_tokens, 0);
	CHECK_EQ_INT(st.retry_after_s, 7);       /* 101 tokens: 6060 ms */
	CHECK_EQ_INT(st.reset_tokens_ms, 66000);
	CHECK_EQ_INT(admit(l, 1, &c, 1, 0, T0 + 6059), QUOTA_TPM);
	CHECK_EQ_INT(admit(l, 1, &c, 1, 0, T0 + 6060), QUOTA_OK);

	/* Over-estimate: the unused part returns. */
	CHECK_EQ_INT(quota_admit(l, 2, &c, 800, 0, T0, &h, &st), QUOTA_OK);
	CHECK_EQ_INT(admit(l, 2, &c, 700, 0, T0), QUOTA_TPM);
	quota_settle(l, &h, 300, -1, T0);
	CHECK_EQ_INT(admit(l, 2, &c, 700, 0, T0), QUOTA_OK);
	CHECK_EQ_INT(admit(l, 2, &c, 1, 0, T0), QUOTA_TPM);

	/* Unknown usage keeps the reservation; a refund never overfills. */
	CHECK_EQ_INT(quota_admit(l, 3, &c, 500, 0, T0, &h, &st), QUOTA_OK);
	quota_settle(l, &h, -1, -1, T0);
	CHECK_EQ_INT(admit(l, 3, &c, 501, 0, T0), QUOTA_TPM);
	CHECK_EQ_INT(quota_admit(l, 3, &c, 500, 0, T0, &h, &st), QUOTA_OK);
	quota_settle(l, &h, 0, -1, T0 + 60000);
	CHECK_EQ_INT(admit(l, 3, &c, 1000, 0, T0 + 60000), QUOTA_OK);
	CHECK_EQ_INT(admit(l, 3, &c, 1, 0, T0 + 60000), QUOTA_TPM);
	quota_free(l);
}

static void test_concurrency(void)
{
	struct quota *l = quota_new();
	struct quota_cfg c = cfg_of(0, 0, 2, 0, QUOTA_PERIOD_DAY);
	struct quota_hold a, b, x;
	struct quota_status st;

	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 0, T0, &a, &st), QUOTA_OK);
	CHECK_EQ_INT(a.concurrent, 1);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 0, T0, &b, &st), QUOTA_OK);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 0, T0, &x, &st), QUOTA_CONCURRENCY);
	CHECK_EQ_INT(st.retry_after_s, 1);
	CHECK_EQ_INT(st.limit_requests, -1);
	quota_settle(l, &a, -1, -1, T0);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 0, T0, &a, &st), QUOTA_OK);
	CHECK_EQ_INT(admit(l, 1, &c, 0, 0, T0), QUOTA_CONCURRENCY);
	quota_settle(l, &a, -1, -1, T0);
	quota_settle(l, &b, -1, -1, T0);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 0, T0, &a, &st), QUOTA_OK);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 0, T0, &b, &st), QUOTA_OK);
	/* Raised live: the count is kept. */
	c.max_concurrent = 3;
	CHECK_EQ_INT(admit(l, 1, &c, 0, 0, T0), QUOTA_OK);
	CHECK_EQ_INT(admit(l, 1, &c, 0, 0, T0), QUOTA_CONCURRENCY);
	quota_free(l);
}

static void test_period_arithmetic(void)
{
	int64_t t, d;
	int y, m;

	CHECK_EQ_INT(quota_period_start(QUOTA_PERIOD_TOTAL, NULL, T0), 0);
	CHECK_EQ_INT(quota_period_end(QUOTA_PERIOD_TOTAL, NULL, T0), INT64_MAX);
	CHECK_EQ_INT(quota_period_start(QUOTA_PERIOD_DAY, NULL, T0), utc_ms(2023, 11, 14, 0, 0, 0));
	CHECK_EQ_INT(quota_period_end(QUOTA_PERIOD_DAY, NULL, T0), utc_ms(2023, 11, 15, 0, 0, 0));
	CHECK_EQ_INT(quota_period_start(QUOTA_PERIOD_MONTH, NULL, T0), utc_ms(2023, 11, 1, 0, 0, 0));
	CHECK_EQ_INT(quota_period_end(QUOTA_PERIOD_MONTH, NULL, utc_ms(2023, 12, 31, 23, 59, 59)),
	             utc_ms(2024, 1, 1, 0, 0, 0));
	CHECK_EQ_INT(quota_period_end(QUOTA_PERIOD_MONTH, NULL, utc_ms(2024, 2, 29, 12, 0, 0)),
	             utc_ms(2024, 3, 1, 0, 0, 0));
	CHECK_EQ_INT(quota_period_end(QUOTA_PERIOD_MONTH, NULL, utc_ms(2100, 2, 28, 12, 0, 0)),
	             utc_ms(2100, 3, 1, 0, 0, 0));
	CHECK_EQ_INT(quota_period_start(QUOTA_PERIOD_DAY, NULL, -1), -DAY);
	CHECK_EQ_INT(quota_period_start(QUOTA_PERIOD_MONTH, NULL, -1), utc_ms(1969, 12, 1, 0, 0, 0));
	/* Every month boundary from 1960 to 2110 against libc, probed at both edges. */
	for (y = 1960; y <= 2110; y++) {
		for (m = 1; m <= 12; m++) {
			t = utc_ms(y, m, 1, 0, 0, 0);
			d = utc_ms(y + (m == 12), m % 12 + 1, 1, 0, 0, 0);
			CHECK_EQ_INT(quota_period_start(QUOTA_PERIOD_MONTH, NULL, t), t);
			CHECK_EQ_INT(quota_period_start(QUOTA_PERIOD_MONTH, NULL, d - 1), t);
			CHECK_EQ_INT(quota_period_end(QUOTA_PERIOD_MONTH, NULL, t), d);
			CHECK_EQ_INT(quota_period_end(QUOTA_PERIOD_MONTH, NULL, d - 1), d);
			CHECK_EQ_INT(quota_period_start(QUOTA_PERIOD_DAY, NULL, d - 1), d - DAY);
		}
	}
}

/* Weeks begin on Monday 00:00 UTC: every day from 1960 to 2110 lies in the week that
 * starts on the Monday libc names at or before it, and the next starts 7 days on. */
static void test_period_weeks(void)
{
	int64_t t, w, end = utc_ms(2110, 1, 1, 0, 0, 0);
	struct tm tm;
	time_t s;

	CHECK_EQ_INT(quota_period_start(QUOTA_PERIOD_WEEK, NULL, T0), utc_ms(2023, 11, 13, 0, 0, 0));
	CHECK_EQ_INT(quota_period_end(QUOTA_PERIOD_WEEK, NULL, T0), utc_ms(2023, 11, 20, 0, 0, 0));
	CHECK_EQ_INT(quota_period_start(QUOTA_PERIOD_WEEK, NULL, 0), utc_ms(1969, 12, 29, 0, 0, 0));
	CHECK_EQ_INT(quota_period_start(QUOTA_PERIOD_WEEK, NULL, -1), utc_ms(1969, 12, 29, 0, 0, 0));
	CHECK_EQ_STR(quota_period_name(QUOTA_PERIOD_WEEK), "week");
	for (t = utc_ms(1960, 1, 1, 0, 0, 0); t < end; t += DAY) {
		w = quota_period_start(QUOTA_PERIOD_WEEK, NULL, t + DAY - 1);
		s = (time_t)(w / 1000);
		gmtime_r(&s, &tm);
		CHECK_EQ_INT(tm.tm_wday, 1);
		CHECK_EQ_INT(tm.tm_hour * 3600 + tm.tm_min * 60 + tm.tm_sec, 0);
		CHECK(w <= t && t < w + 7 * DAY);
		CHECK_EQ_INT(quota_period_end(QUOTA_PERIOD_WEEK, NULL, t), w + 7 * DAY);
	}
}

/* A weekly budget at its boundary, on the clock admit is given: spent on Sunday
 * 23:59:59.999 it refuses with Retry-After counting to Monday, which starts from 0;
 * a hold of Sunday's is charged to Sunday's week. */
static void test_budget_week(void)
{
	struct quota *l = quota_new();
	struct quota_cfg c = cfg_of(0, 0, 0, 1000, QUOTA_PERIOD_WEEK);
	int64_t monday = utc_ms(2026, 12, 7, 0, 0, 0), sunday = monday - 1;
	int64_t week = quota_period_start(QUOTA_PERIOD_WEEK, NULL, sunday);
	struct quota_hold a, b;
	struct quota_status st;

	CHECK_EQ_INT(week, utc_ms(2026, 11, 30, 0, 0, 0));
	quota_set_spent(l, 1, QUOTA_PERIOD_WEEK, NULL, 0, week, 990);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 10, sunday - 5000, &a, &st), QUOTA_OK);
	CHECK_EQ_INT(a.period_start_ms, week);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 1, sunday - 5000, &b, &st), QUOTA_BUDGET);
	CHECK_EQ_INT(st.retry_after_s, 6);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 1, sunday, &b, &st), QUOTA_BUDGET);
	CHECK_EQ_INT(st.retry_after_s, 1);
	/* Sunday's hold still reserves its 10 until settled, then charges Sunday's week. */
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 991, monday, &b, &st), QUOTA_BUDGET);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 990, monday, &b, &st), QUOTA_OK);
	CHECK_EQ_INT(b.period_start_ms, monday);
	quota_settle(l, &a, -1, 10, monday + 1);
	quota_settle(l, &b, -1, 990, monday + 1);
	CHECK_EQ_INT(admit(l, 1, &c, 0, 11, monday + 2), QUOTA_BUDGET);
	CHECK_EQ_INT(admit(l, 1, &c, 0, 10, monday + 2), QUOTA_OK);
	CHECK_EQ_INT(admit(l, 1, &c, 0, 1, monday + 7 * DAY - 1), QUOTA_BUDGET);
	CHECK_EQ_INT(admit(l, 1, &c, 0, 1, monday + 7 * DAY), QUOTA_OK);
	quota_free(l);
}

/* A day budget in Asia/Kolkata (+05:30): its day turns at 18:30Z, not at midnight UTC;
 * a zone set on a key counting in UTC takes the seed of the zone's period, even one that
 * starts earlier than the period counted (a later seed would be needed otherwise). */
static void test_budget_zone(void)
{
	struct quota *l = quota_new();
	char err[256];
	const struct tz *in = tz_get("Asia/Kolkata", err, sizeof(err));
	struct quota_cfg utc = cfg_of(0, 0, 0, 1000, QUOTA_PERIOD_DAY), c = utc, old, new;
	int64_t turn = utc_ms(2026, 12, 7, 18, 30, 0);
	struct quota_hold a;
	struct quota_status st;

	CHECK(in != NULL);
	c.tz = in;
	CHECK_EQ_INT(quota_period_start(QUOTA_PERIOD_DAY, in, turn - 1), turn - DAY);
	CHECK_EQ_INT(quota_period_start(QUOTA_PERIOD_DAY, in, turn), turn);
	CHECK_EQ_INT(quota_period_end(QUOTA_PERIOD_DAY, in, turn - 1), turn);
	quota_set_spent(l, 1, QUOTA_PERIOD_DAY, in, 0, turn - DAY, 1000);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 1, turn - 1, &a, &st), QUOTA_BUDGET);
	CHECK_EQ_INT(st.retry_after_s, 1);
	/* 18:30Z: Kolkata's next day, the budget whole again; UTC's day had not turned. */
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 1000, turn, &a, &st), QUOTA_OK);
	CHECK_EQ_INT(a.period_start_ms, turn);
	quota_settle(l, &a, -1, 1000, turn);
	CHECK_EQ_INT(admit(l, 1, &c, 0, 1, turn + 1), QUOTA_BUDGET);

	/* Key 2 counts in UTC since 00:00Z on the 8th; set to Kolkata, its day began at
	 * 18:30Z on the 7th: the seed of that period stands, earlier or not. */
	quota_set_spent(l, 2, QUOTA_PERIOD_DAY, NULL, 0, turn + 5 * 3600000 + 1800000, 100);
	CHECK_EQ_INT(admit(l, 2, &utc, 0, 900, turn + 6 * 3600000), QUOTA_OK);
	CHECK_EQ_INT(admit(l, 2, &utc, 0, 1, turn + 6 * 3600000), QUOTA_BUDGET);
	/* (the 900 stays reserved) */
	quota_set_spent(l, 2, QUOTA_PERIOD_DAY, in, 0, turn, 0);
	CHECK_EQ_INT(admit(l, 2, &c, 0, 101, turn + 6 * 3600000), QUOTA_BUDGET);
	CHECK_EQ_INT(admit(l, 2, &c, 0, 100, turn + 6 * 3600000), QUOTA_OK);
	quota_set_spent(l, 3, QUOTA_PERIOD_DAY, NULL, 0, turn + 5 * 3600000 + 1800000, 100);
	quota_set_spent(l, 3, QUOTA_PERIOD_DAY, in, 0, turn, 700);
	CHECK_EQ_INT(admit(l, 3, &c, 0, 301, turn + 6 * 3600000), QUOTA_BUDGET);
	CHECK_EQ_INT(admit(l, 3, &c, 0, 300, turn + 6 * 3600000), QUOTA_OK);

	/* Key 4 moves from UTC to Kolkata a second before Kolkata's midnight: the seed (900)
	 * comes first, then a thread still on the old limits admits, then the new limits
	 * after the midnight (generations 1 and 2). The old limits must not take the key
	 * back to UTC's day, nor carry the seed into Kolkata's new day. */
	old = utc;
	old.generation = 1;
	new = c;
	new.generation = 2;
	quota_set_spent(l, 4, QUOTA_PERIOD_DAY, NULL, 1, turn - DAY / 2 - 1800000, 0);
	CHECK_EQ_INT(admit(l, 4, &old, 0, 0, turn - 2000), QUOTA_OK);
	quota_set_spent(l, 4, QUOTA_PERIOD_DAY, in, 2, turn - DAY, 900);
	CHECK_EQ_INT(admit(l, 4, &old, 0, 101, turn - 500), QUOTA_BUDGET);
	/* a seed of the older generation, read late, changes nothing */
	quota_set_spent(l, 4, QUOTA_PERIOD_DAY, NULL, 1, turn - DAY / 2 - 1800000, 0);
	CHECK_EQ_INT(admit(l, 4, &old, 0, 101, turn - 400), QUOTA_BUDGET);
	CHECK_EQ_INT(quota_admit(l, 4, &new, 0, 1000, turn + 1000, &a, &st), QUOTA_OK);
	CHECK_EQ_INT(a.period_start_ms, turn);
	/* the old limits again, after the midnight: Kolkata's new day, spent */
	CHECK_EQ_INT(admit(l, 4, &old, 0, 1, turn + 2000), QUOTA_BUDGET);

	/* Key 5: day (1), month (2, seeded with 900), day again (3) whose seed failed: the
	 * newest limits are taken, keeping the 900, and their days turn. */
	old = utc;
	old.generation = 1;
	quota_set_spent(l, 5, QUOTA_PERIOD_DAY, NULL, 1, utc_ms(2026, 12, 7, 0, 0, 0), 0);
	CHECK_EQ_INT(admit(l, 5, &old, 0, 0, turn), QUOTA_OK);
	quota_set_spent(l, 5, QUOTA_PERIOD_MONTH, NULL, 2, utc_ms(2026, 12, 1, 0, 0, 0), 900);
	old.generation = 3;
	CHECK_EQ_INT(admit(l, 5, &old, 0, 101, turn + 1000), QUOTA_BUDGET);
	CHECK_EQ_INT(admit(l, 5, &old, 0, 1000, utc_ms(2026, 12, 8, 0, 0, 1)), QUOTA_OK);

	/* Key 6: a request admitted in UTC's day (from 00:00Z on the 8th) is in flight when
	 * the key moves to Kolkata, whose day began earlier (18:30Z on the 7th) and is
	 * seeded without it (its row is not stored yet): its settlement is charged. */
	old = utc;
	old.generation = 1;
	new = c;
	new.generation = 2;
	quota_set_spent(l, 6, QUOTA_PERIOD_DAY, NULL, 1, utc_ms(2026, 12, 8, 0, 0, 0), 0);
	CHECK_EQ_INT(quota_admit(l, 6, &old, 0, 400, turn + 6 * 3600000, &a, &st), QUOTA_OK);
	quota_set_spent(l, 6, QUOTA_PERIOD_DAY, in, 2, turn, 0);
	quota_settle(l, &a, -1, 400, turn + 6 * 3600000 + 1000);
	CHECK_EQ_INT(admit(l, 6, &new, 0, 601, turn + 6 * 3600000 + 2000), QUOTA_BUDGET);
	CHECK_EQ_INT(admit(l, 6, &new, 0, 600, turn + 6 * 3600000 + 2000), QUOTA_OK);
	quota_free(l);
}

/* Zone "Zz" read twice from a zone directory of our own, its file first a copy of
 * zoneinfo's first, then replaced by a copy of second (a tzdata upgrade: tz_get reads
 * it again). 0, or -1. */
static int two_readings(const char *first, const char *second, const struct tz **one,
                        const struct tz **two)
{
	char dir[] = "/tmp/tally-test-tz-XXXXXX", from[128], path[128], err[256];

	*one = *two = NULL;
	if (!mkdtemp(dir))
		return -1;
	snprintf(path, sizeof(path), "%s/Zz", dir);
	setenv("TZDIR", dir, 1);
	snprintf(from, sizeof(from), "/usr/share/zoneinfo/%s", first);
	if (test_copy(from, path) == 0)
		*one = tz_get("Zz", err, sizeof(err));
	unlink(path);
	snprintf(from, sizeof(from), "/usr/share/zoneinfo/%s", second);
	if (test_copy(from, path) == 0)
		*two = tz_get("Zz", err, sizeof(err));
	unsetenv("TZDIR");
	unlink(path);
	rmdir(dir);
	return *one && *two && *one != *two ? 0 : -1;
}

/* The same zone read again (a tzdata upgrade: another tz_get entry, the same name) is
 * no change of zone: a seed of it never lowers what the period counted. */
static void test_budget_zone_read_again(void)
{
	struct quota *l = quota_new();
	struct quota_cfg c = cfg_of(0, 0, 0, 1000, QUOTA_PERIOD_DAY);
	int64_t turn = utc_ms(2026, 12, 7, 18, 30, 0);
	const struct tz *one, *two;
	struct quota_hold a;
	struct quota_status st;

	CHECK_EQ_INT(two_readings("Asia/Kolkata", "Asia/Kolkata", &one, &two), 0);
	if (!one || !two)
		goto out;
	c.tz = one;
	quota_set_spent(l, 1, QUOTA_PERIOD_DAY, one, 0, turn, 0);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 300, turn + 1000, &a, &st), QUOTA_OK);
	quota_settle(l, &a, -1, 300, turn + 1000);
	/* the store has not the 300 yet */
	quota_set_spent(l, 1, QUOTA_PERIOD_DAY, two, 0, turn, 0);
	c.tz = two;
	CHECK_EQ_INT(admit(l, 1, &c, 0, 701, turn + 2000), QUOTA_BUDGET);
	CHECK_EQ_INT(admit(l, 1, &c, 0, 700, turn + 2000), QUOTA_OK);
out:
	quota_free(l);
}

/* A zone whose rules change under the same name (Kolkata's +05:30, then Dhaka's
 * +06:00): the newest limits' rules place the period from then on; what the state
 * counted is not lowered by the earlier start the new rules give. */
static void test_budget_zone_new_rules(void)
{
	struct quota *l = quota_new();
	struct quota_cfg c = cfg_of(0, 0, 0, 1000, QUOTA_PERIOD_DAY);
	int64_t turn = utc_ms(2026, 12, 7, 18, 30, 0), dhaka = turn - 1800000;
	const struct tz *one, *two;
	struct quota_hold a;
	struct quota_status st;

	CHECK_EQ_INT(two_readings("Asia/Kolkata", "Asia/Dhaka", &one, &two), 0);
	if (!one || !two)
		goto out;
	c.tz = one;
	c.generation = 1;
	quota_set_spent(l, 1, QUOTA_PERIOD_DAY, one, 1, turn, 0);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 300, turn + 1000, &a, &st), QUOTA_OK);
	quota_settle(l, &a, -1, 300, turn + 1000);
	/* the upgrade's reload: Dhaka's day began at 18:00, the store lags */
	CHECK_EQ_INT(quota_period_start(QUOTA_PERIOD_DAY, two, turn + 2000), dhaka);
	quota_set_spent(l, 1, QUOTA_PERIOD_DAY, two, 2, dhaka, 0);
	c.tz = two;
	c.generation = 2;
	CHECK_EQ_INT(admit(l, 1, &c, 0, 701, turn + 3000), QUOTA_BUDGET);
	/* the next day is Dhaka's, 30 minutes before Kolkata's */
	CHECK_EQ_INT(admit(l, 1, &c, 0, 1000, dhaka + DAY + 1000), QUOTA_OK);
out:
	quota_free(l);
}

static void test_budget_day(void)
{
	struct quota *l = quota_new();
	struct quota_cfg c = cfg_of(0, 0, 0, 1000, QUOTA_PERIOD_DAY);
	int64_t day = quota_period_start(QUOTA_PERIOD_DAY, NULL, T0), late = day + DAY - 1000;
	struct quota_hold a, b;
	struct quota_status st;

	quota_set_spent(l, 1, QUOTA_PERIOD_DAY, NULL, 0, day, 900);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 100, T0, &a, &st), QUOTA_OK);
	CHECK_EQ_INT(a.cost_micros, 100);
	CHECK_EQ_INT(a.period_start_ms, day);
	/* The reservation counts: nothing is left. */
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 1, T0, &b, &st), QUOTA_BUDGET);
	CHECK_EQ_INT(st.retry_after_s, (day + DAY - T0 + 999) / 1000);
	quota_settle(l, &a, -1, 50, T0);
	CHECK_EQ_INT(admit(l, 1, &c, 0, 51, T0), QUOTA_BUDGET);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 50, T0, &a, &st), QUOTA_OK);
	quota_settle(l, &a, -1, 50, T0);
	/* Exhausted exactly: a request of unknown cost is refused too. */
	CHECK_EQ_INT(admit(l, 1, &c, 0, 0, T0), QUOTA_BUDGET);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 0, late, &a, &st), QUOTA_BUDGET);
	CHECK_EQ_INT(st.retry_after_s, 1);
	/* A stale seed for an earlier period changes nothing. */
	quota_set_spent(l, 1, QUOTA_PERIOD_DAY, NULL, 0, day - DAY, 0);
	CHECK_EQ_INT(admit(l, 1, &c, 0, 0, T0), QUOTA_BUDGET);

	/* A new day starts from 0; a hold from the day before does not charge it but its
	 * reservation counts until settled. */
	quota_set_spent(l, 2, QUOTA_PERIOD_DAY, NULL, 0, day, 0);
	CHECK_EQ_INT(quota_admit(l, 2, &c, 0, 400, late, &a, &st), QUOTA_OK);
	CHECK_EQ_INT(quota_admit(l, 2, &c, 0, 600, day + DAY, &b, &st), QUOTA_OK);
	CHECK_EQ_INT(b.period_start_ms, day + DAY);
	CHECK_EQ_INT(admit(l, 2, &c, 0, 1, day + DAY), QUOTA_BUDGET);
	quota_settle(l, &a, -1, 400, day + DAY + 1);
	quota_settle(l, &b, -1, 0, day + DAY + 1);
	CHECK_EQ_INT(admit(l, 2, &c, 0, 1000, day + DAY + 2), QUOTA_OK);
	quota_free(l);
}

/* Spends the whole budget of key at t, then checks the next admit at next_t. */
static void spend_across(struct quota *l, int64_t key, int64_t t, int64_t next_t,
                         enum quota_verdict expect)
{
	struct quota_cfg c = cfg_of(0, 0, 0, 1000, QUOTA_PERIOD_MONTH);
	struct quota_hold h;
	struct quota_status st;

	CHECK_EQ_INT(quota_admit(l, key, &c, 0, 1000, t, &h, &st), QUOTA_OK);
	quota_settle(l, &h, -1, 1000, t);
	CHECK_EQ_INT(quota_admit(l, key, &c, 0, 1, t, &h, &st), QUOTA_BUDGET);
	CHECK_EQ_INT(st.retry_after_s,
	             (quota_period_end(QUOTA_PERIOD_MONTH, NULL, t) - t + 999) / 1000);
	CHECK_EQ_INT(admit(l, key, &c, 0, 1, next_t), expect);
}

static void test_budget_month(void)
{
	struct quota *l = quota_new();

	spend_across(l, 1, utc_ms(2023, 12, 31, 23, 59, 59), utc_ms(2024, 1, 1, 0, 0, 0),
	             QUOTA_OK);
	spend_across(l, 2, utc_ms(2024, 2, 1, 0, 0, 0), utc_ms(2024, 2, 29, 23, 59, 59),
	             QUOTA_BUDGET);
	spend_across(l, 3, utc_ms(2024, 2, 29, 23, 59, 59), utc_ms(2024, 3, 1, 0, 0, 0),
	             QUOTA_OK);
	spend_across(l, 4, utc_ms(2023, 2, 28, 23, 59, 59), utc_ms(2023, 3, 1, 0, 0, 0),
	             QUOTA_OK);
	spend_across(l, 5, utc_ms(2024, 1, 31, 12, 0, 0), utc_ms(2024, 1, 31, 23, 59, 59),
	             QUOTA_BUDGET);
	quota_free(l);
}

/* The database lags what was settled; a changed period kind counts from its seed. */
static void test_budget_reseed(void)
{
	struct quota *l = quota_new();
	struct quota_cfg day_cfg = cfg_of(0, 0, 0, 1000, QUOTA_PERIOD_DAY);
	struct quota_cfg month_cfg = cfg_of(0, 0, 0, 1000, QUOTA_PERIOD_MONTH);
	int64_t day = quota_period_start(QUOTA_PERIOD_DAY, NULL, T0);
	int64_t month = quota_period_start(QUOTA_PERIOD_MONTH, NULL, T0);
	struct quota_hold a;
	struct quota_status st;

	quota_set_spent(l, 1, QUOTA_PERIOD_DAY, NULL, 0, day, 0);
	CHECK_EQ_INT(quota_admit(l, 1, &day_cfg, 0, 600, T0, &a, &st), QUOTA_OK);
	quota_settle(l, &a, -1, 600, T0);
	/* A reseed from a database that has not stored that row yet keeps the 600. */
	quota_set_spent(l, 1, QUOTA_PERIOD_DAY, NULL, 0, day, 100);
	CHECK_EQ_INT(admit(l, 1, &day_cfg, 0, 401, T0), QUOTA_BUDGET);
	/* Day to month: the month's spend so far (from the database) counts at once. */
	quota_set_spent(l, 1, QUOTA_PERIOD_MONTH, NULL, 0, month, 950);
	CHECK_EQ_INT(admit(l, 1, &month_cfg, 0, 51, T0), QUOTA_BUDGET);
	CHECK_EQ_INT(admit(l, 1, &month_cfg, 0, 50, T0), QUOTA_OK);
	quota_free(l);
}

static void test_budget_total(void)
{
	struct quota *l = quota_new();
	struct quota_cfg c = cfg_of(0, 0, 0, 500, QUOTA_PERIOD_TOTAL);
	struct quota_hold h;
	struct quota_status st;

	quota_set_spent(l, 1, QUOTA_PERIOD_TOTAL, NULL, 0, 0, 499);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 1, T0, &h, &st), QUOTA_OK);
	CHECK_EQ_INT(h.period_start_ms, 0);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 1, T0 + 100 * DAY, &h, &st), QUOTA_BUDGET);
	CHECK_EQ_INT(st.retry_after_s, -1);
	quota_free(l);
}

static void test_combined(void)
{
	struct quota *l = quota_new();
	struct quota_cfg c = cfg_of(2, 1000, 1, 300, QUOTA_PERIOD_DAY);
	struct quota_hold h;
	struct quota_status st;

	CHECK_EQ_INT(quota_admit(l, 1, &c, 100, 100, T0, &h, &st), QUOTA_OK);
	CHECK_EQ_INT(h.tokens, 100);
	CHECK_EQ_INT(h.cost_micros, 100);
	/* Concurrency is checked first, though rpm would admit. */
	CHECK_EQ_INT(admit(l, 1, &c, 100, 100, T0), QUOTA_CONCURRENCY);
	quota_settle(l, &h, 100, 100, T0);
	/* Budget refuses; the refusal must not take the last request. */
	CHECK_EQ_INT(admit(l, 1, &c, 100, 201, T0), QUOTA_BUDGET);
	CHECK_EQ_INT(admit(l, 1, &c, 901, 100, T0), QUOTA_TPM);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 900, 200, T0, &h, &st), QUOTA_OK);
	CHECK_EQ_INT(st.remaining_requests, 0);
	CHECK_EQ_INT(st.remaining_tokens, 0);
	quota_settle(l, &h, 900, 200, T0);
	/* Every limit is now exhausted: rpm comes before tpm and budget. */
	CHECK_EQ_INT(admit(l, 1, &c, 1, 1, T0), QUOTA_RPM);
	c.rpm = 0;
	CHECK_EQ_INT(admit(l, 1, &c, 1, 1, T0), QUOTA_TPM);
	c.tpm = 0;
	CHECK_EQ_INT(admit(l, 1, &c, 1, 1, T0), QUOTA_BUDGET);
	quota_free(l);
}

static void test_live_change(void)
{
	struct quota *l = quota_new();
	struct quota_cfg c = cfg_of(100, 0, 0, 0, QUOTA_PERIOD_DAY);
	struct quota_status st;
	struct quota_hold h;
	int i, n = 0;

	for (i = 0; i < 10; i++)
		CHECK_EQ_INT(admit(l, 1, &c, 0, 0, T0), QUOTA_OK);
	/* Lowered to 5 with 10 used: in debt, nothing more until 6 have refilled. */
	c.rpm = 5;
	while (admit(l, 1, &c, 0, 0, T0) == QUOTA_OK && n < 100)
		n++;
	CHECK_EQ_INT(n, 0);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 0, T0, &h, &st), QUOTA_RPM);
	CHECK_EQ_INT(st.retry_after_s, 72);
	/* Raised to 100: the 10 used still count, and 90 remain at once. */
	c.rpm = 100;
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 0, T0 + 600, &h, &st), QUOTA_OK);
	CHECK_EQ_INT(st.remaining_requests, 89);
	/* Switched off and on again: starts full. */
	c.rpm = 0;
	c.tpm = 1000;
	CHECK_EQ_INT(admit(l, 1, &c, 1000, 0, T0 + 600), QUOTA_OK);
	c.rpm = 100;
	c.tpm = 10;
	n = 0;
	while (admit(l, 1, &c, 0, 0, T0 + 600) == QUOTA_OK && n < 1000)
		n++;
	CHECK_EQ_INT(n, 0);                      /* rpm restarts full, tpm is still spent */
	c.tpm = 0;
	while (admit(l, 1, &c, 0, 0, T0 + 600) == QUOTA_OK && n < 1000)
		n++;
	CHECK_EQ_INT(n, 100);
	quota_free(l);
}

static void test_oversized(void)
{
	struct quota *l = quota_new();
	struct quota_cfg c = cfg_of(0, 1000, 0, 0, QUOTA_PERIOD_DAY);
	struct quota_hold h;
	struct quota_status st;

	/* Larger than the limit: admitted only into an unused window. */
	CHECK_EQ_INT(admit(l, 1, &c, 10, 0, T0), QUOTA_OK);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 5000, 0, T0, &h, &st), QUOTA_TPM);
	CHECK_EQ_INT(st.retry_after_s, 1);       /* 10 tokens: 600 ms until full */
	CHECK_EQ_INT(admit(l, 1, &c, 5000, 0, T0 + 599), QUOTA_TPM);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 5000, 0, T0 + 600, &h, &st), QUOTA_OK);
	CHECK_EQ_INT(h.tokens, 5000);
	CHECK_EQ_INT(st.remaining_tokens, 0);
	CHECK_EQ_INT(st.reset_tokens_ms, 300000);
	/* Its excess is debt: 4001 tokens until one more fits. */
	CHECK_EQ_INT(quota_admit(l, 1, &c, 1, 0, T0 + 600, &h, &st), QUOTA_TPM);
	CHECK_EQ_INT(st.retry_after_s, 241);
	CHECK_EQ_INT(admit(l, 1, &c, 1, 0, T0 + 600 + 240059), QUOTA_TPM);
	CHECK_EQ_INT(admit(l, 1, &c, 1, 0, T0 + 600 + 240060), QUOTA_OK);
	quota_free(l);
}

/* x-ratelimit figures with fractional refill. */
static void test_status(void)
{
	struct quota *l = quota_new();
	struct quota_cfg c = cfg_of(60, 6000, 0, 0, QUOTA_PERIOD_DAY);
	struct quota_hold h;
	struct quota_status st;

	CHECK_EQ_INT(quota_admit(l, 1, &c, 1000, 0, T0, &h, &st), QUOTA_OK);
	CHECK_EQ_INT(st.limit_requests, 60);
	CHECK_EQ_INT(st.remaining_requests, 59);
	CHECK_EQ_INT(st.reset_requests_ms, 1000);
	CHECK_EQ_INT(st.limit_tokens, 6000);
	CHECK_EQ_INT(st.remaining_tokens, 5000);
	CHECK_EQ_INT(st.reset_tokens_ms, 10000);
	CHECK_EQ_INT(st.retry_after_s, 0);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 0, T0 + 500, &h, &st), QUOTA_OK);
	CHECK_EQ_INT(st.remaining_requests, 58);
	CHECK_EQ_INT(st.reset_requests_ms, 1500);
	CHECK_EQ_INT(st.remaining_tokens, 5050);
	CHECK_EQ_INT(st.reset_tokens_ms, 9500);
	/* A rate that is not a whole number per ms: 7 per minute. */
	c = cfg_of(7, 0, 0, 0, QUOTA_PERIOD_DAY);
	CHECK_EQ_INT(quota_admit(l, 2, &c, 0, 0, T0, &h, &st), QUOTA_OK);
	CHECK_EQ_INT(st.reset_requests_ms, 8572);     /* ceil(60000 / 7) */
	CHECK_EQ_INT(quota_admit(l, 2, &c, 0, 0, T0 + 1, &h, &st), QUOTA_OK);
	CHECK_EQ_INT(st.reset_requests_ms, 17142);    /* ceil(120000 / 7) - 1 */
	quota_free(l);
}

/* A look at a key's windows says what its next admission's headers would, takes
 * nothing, and moves nothing: looking twice, or between admissions, changes no figure. */
static void test_peek(void)
{
	struct quota *l = quota_new();
	struct quota_cfg c = cfg_of(60, 6000, 3, 0, QUOTA_PERIOD_DAY);
	struct quota_hold h;
	struct quota_status st, again;
	int64_t in_flight;

	/* Never admitted: full windows, nothing in flight, and no state made. */
	quota_peek(l, 9, &c, T0, &st, &in_flight);
	CHECK_EQ_INT(st.limit_requests, 60);
	CHECK_EQ_INT(st.remaining_requests, 60);
	CHECK_EQ_INT(st.remaining_tokens, 6000);
	CHECK_EQ_INT(in_flight, 0);
	CHECK_EQ_INT(quota_admit(l, 1, &c, 1000, 0, T0, &h, &st), QUOTA_OK);
	quota_peek(l, 1, &c, T0, &st, &in_flight);
	CHECK_EQ_INT(st.remaining_requests, 59);
	CHECK_EQ_INT(st.remaining_tokens, 5000);
	CHECK_EQ_INT(st.reset_requests_ms, 1000);
	CHECK_EQ_INT(in_flight, 1);
	quota_peek(l, 1, &c, T0 + 500, &again, &in_flight);
	CHECK_EQ_INT(again.remaining_requests, 59);
	CHECK_EQ_INT(again.reset_requests_ms, 500);
	CHECK_EQ_INT(again.remaining_tokens, 5050);
	/* The next admission sees the windows as if nobody had looked. */
	CHECK_EQ_INT(quota_admit(l, 1, &c, 0, 0, T0 + 500, &h, &st), QUOTA_OK);
	CHECK_EQ_INT(st.remaining_requests, 58);
	CHECK_EQ_INT(st.remaining_tokens, 5050);
	quota_peek(l, 1, &c, T0 + 500, &st, &in_flight);
	CHECK_EQ_INT(in_flight, 2);
	/* No such limit: -1, as in the headers. */
	c = cfg_of(0, 0, 0, 0, QUOTA_PERIOD_DAY);
	quota_peek(l, 1, &c, T0, &st, &in_flight);
	CHECK_EQ_INT(st.limit_requests, -1);
	CHECK_EQ_INT(st.limit_tokens, -1);
	CHECK_EQ_STR(quota_period_name(QUOTA_PERIOD_DAY), "day");
	CHECK_EQ_STR(quota_period_name(QUOTA_PERIOD_MONTH), "month");
	CHECK_EQ_STR(quota_period_name(QUOTA_PERIOD_TOTAL), "total");
	quota_free(l);
}

/* Peer-facing inputs: negative and absurd estimates, usage and limits. */
static void test_clamps(void)
{
	struct quota *l = quota_new();
	struct quota_cfg c = cfg_of(BIG, BIG, BIG, BIG, QUOTA_PERIOD_MONTH);
	struct quota_cfg huge = cfg_of(INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX,
	                                QUOTA_PERIOD_DAY);
	struct quota_cfg neg = cfg_of(-1, -5, -1, -1, QUOTA_PERIOD_DAY);
	struct quota_cfg one = cfg_of(1, 1, 0, 1, QUOTA_PERIOD_DAY);
	struct quota_hold h;
	struct quota_status st;

	CHECK_EQ_INT(quota_admit(l, 1, &neg, 5, 5, T0, &h, &st), QUOTA_OK);
	CHECK_EQ_INT(h.key_id, 0);
	CHECK_EQ_INT(quota_admit(l, 1, &c, -7, -7, T0, &h, &st), QUOTA_OK);
	CHECK_EQ_INT(h.tokens, 0);
	CHECK_EQ_INT(h.cost_micros, 0);
	CHECK_EQ_INT(quota_admit(l, 2, &huge, INT64_MAX, INT64_MAX, T0, &h, &st), QUOTA_OK);
	CHECK_EQ_INT(h.tokens, BIG);
	CHECK_EQ_INT(st.limit_tokens, BIG);
	quota_settle(l, &h, INT64_MAX, INT64_MAX, T0);
	CHECK_EQ_INT(quota_admit(l, 2, &huge, 1, 1, T0, &h, &st), QUOTA_TPM);
	CHECK(st.retry_after_s >= 1);
	CHECK(st.reset_tokens_ms > 0);
	CHECK_EQ_INT(admit(l, 2, &huge, 1, 1, T0 + 3 * 60000), QUOTA_BUDGET);
	/* Deep debt at a tiny rate: the waits saturate instead of overflowing. */
	CHECK_EQ_INT(quota_admit(l, 3, &one, 0, 0, T0, &h, &st), QUOTA_OK);
	quota_settle(l, &h, INT64_MAX, INT64_MAX, T0);
	quota_settle(l, &h, INT64_MAX, INT64_MAX, T0);
	CHECK_EQ_INT(quota_admit(l, 3, &one, INT64_MAX, 0, T0 + 60000, &h, &st), QUOTA_TPM);
	CHECK(st.retry_after_s > 1000000000000LL);
	CHECK(st.reset_tokens_ms > 0);
	one.tpm = 0;
	CHECK_EQ_INT(quota_admit(l, 3, &one, 0, 0, T0 + 60000, &h, &st), QUOTA_BUDGET);
	/* A clock read earlier arriving late neither refills nor rewinds. */
	one = cfg_of(1, 0, 0, 0, QUOTA_PERIOD_DAY);
	CHECK_EQ_INT(admit(l, 4, &one, 0, 0, T0), QUOTA_OK);
	CHECK_EQ_INT(admit(l, 4, &one, 0, 0, T0 - 120000), QUOTA_RPM);
	CHECK_EQ_INT(admit(l, 4, &one, 0, 0, T0 + 59999), QUOTA_RPM);
	CHECK_EQ_INT(admit(l, 4, &one, 0, 0, T0 + 60000), QUOTA_OK);
	quota_free(l);
}

/* Enough keys to grow every shard's table several times. */
static void test_many_keys(void)
{
	struct quota *l = quota_new();
	struct quota_cfg c = cfg_of(1, 0, 0, 0, QUOTA_PERIOD_DAY);
	int64_t k;
	int ok = 0, refused = 0;

	for (k = 1; k <= 5000; k++)
		ok += admit(l, k * 7919, &c, 0, 0, T0) == QUOTA_OK;
	for (k = 1; k <= 5000; k++)
		refused += admit(l, k * 7919, &c, 0, 0, T0) == QUOTA_RPM;
	CHECK_EQ_INT(ok, 5000);
	CHECK_EQ_INT(refused, 5000);
	quota_free(l);
}

#define THREADS     8
#define PER_THREAD  1000

struct worker {
	struct quota *l;
	struct quota_cfg cfg;
	int ok;
	atomic_int *in_flight;        /* NULL: admit only */
	atomic_int *max_seen;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct quota_hold h;
	struct quota_status st;
	int i, cur, seen;

	for (i = 0; i < PER_THREAD; i++) {
		if (quota_admit(w->l, 42, &w->cfg, 10, 10, T0, &h, &st) != QUOTA_OK)
			continue;
		w->ok++;
		if (!w->in_flight)
			continue;
		cur = atomic_fetch_add(w->in_flight, 1) + 1;
		seen = atomic_load(w->max_seen);
		while (cur > seen && !atomic_compare_exchange_weak(w->max_seen, &seen, cur))
			;
		sched_yield();
		atomic_fetch_sub(w->in_flight, 1);
		quota_settle(w->l, &h, 10, 10, T0);
	}
	return NULL;
}

/* Runs THREADS workers over one key and returns the admits. */
static int run_workers(struct quota *l, const struct quota_cfg *cfg,
                       atomic_int *in_flight, atomic_int *max_seen)
{
	struct worker w[THREADS];
	pthread_t t[THREADS];
	int i, ok = 0;

	for (i = 0; i < THREADS; i++) {
		w[i] = (struct worker){ l, *cfg, 0, in_flight, max_seen };
		CHECK_EQ_INT(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
	}
	for (i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		ok += w[i].ok;
	}
	return ok;
}

static void test_threads_rpm(void)
{
	struct quota *l = quota_new();
	struct quota_cfg c = cfg_of(500, 0, 0, 0, QUOTA_PERIOD_DAY);

	CHECK_EQ_INT(run_workers(l, &c, NULL, NULL), 500);
	quota_free(l);
}

static void test_threads_concurrency(void)
{
	struct quota *l = quota_new();
	struct quota_cfg c = cfg_of(0, 0, 7, 0, QUOTA_PERIOD_DAY);
	atomic_int in_flight = 0, max_seen = 0;
	struct quota_hold h[8];
	struct quota_status st;
	int i, ok;

	ok = run_workers(l, &c, &in_flight, &max_seen);
	CHECK(ok > 0);
	CHECK(atomic_load(&max_seen) <= 7);
	CHECK(atomic_load(&max_seen) >= 1);
	CHECK_EQ_INT(atomic_load(&in_flight), 0);
	/* Every slot came back. */
	for (i = 0; i < 7; i++)
		CHECK_EQ_INT(quota_admit(l, 42, &c, 0, 0, T0, &h[i], &st), QUOTA_OK);
	CHECK_EQ_INT(quota_admit(l, 42, &c, 0, 0, T0, &h[7], &st), QUOTA_CONCURRENCY);
	quota_free(l);
}

/* Admits at key (with its cfg c and hold h) and, when team_cfg is not NULL, at team
 * team_id (hold th): quota_admit_all as session.c calls it. *level: the index that
 * refused (0 the key, 1 the team), 0 when admitted. */
static enum quota_verdict admit_levels(struct quota *l, int64_t key, const struct quota_cfg *c,
                                       int64_t team_id, const struct quota_cfg *team_cfg,
                                       int64_t cost, int64_t now, struct quota_hold *h,
                                       struct quota_hold *th, struct quota_status *st,
                                       int *level)
{
	struct quota_subject at[2] = {
		{ key, c, h, 0, NULL }, { quota_team_subject(team_id), team_cfg, th, 0, NULL },
	};
	enum quota_verdict v;
	size_t refused = 0;

	memset(th, 0, sizeof(*th));
	v = quota_admit_all(l, at, team_cfg ? 2 : 1, 10, cost, now, st, &refused);
	*level = v == QUOTA_OK ? 0 : (int)refused;
	return v;
}

/* A key and its team (quota_admit_all): a request passes only if both admit it; the
 * level that refused is told; a team's refusal leaves the key's windows, budget and
 * slots as if the request never came; settlement charges both. Keys 1 and 2 share
 * team 5. */
static enum quota_verdict admit_team(struct quota *l, int64_t key, const struct quota_cfg *c,
                                     const struct quota_cfg *team, int64_t cost, int64_t now,
                                     struct quota_hold *h, struct quota_hold *th, int *level)
{
	struct quota_status st;

	return admit_levels(l, key, c, 5, team, cost, now, h, th, &st, level);
}

static void test_team_rates(void)
{
	struct quota *l = quota_new();
	struct quota_cfg key = cfg_of(3, 0, 0, 0, QUOTA_PERIOD_DAY);
	struct quota_cfg none = cfg_of(0, 0, 0, 0, QUOTA_PERIOD_DAY);
	struct quota_cfg team = cfg_of(2, 0, 0, 0, QUOTA_PERIOD_DAY);
	struct quota_hold h, th;
	struct quota_status st;
	int level;

	CHECK_EQ_INT(admit_team(l, 1, &key, &team, 0, T0, &h, &th, &level), QUOTA_OK);
	CHECK_EQ_INT(level, 0);
	CHECK_EQ_INT(h.key_id, 1);
	CHECK_EQ_INT(th.key_id, quota_team_subject(5));
	CHECK_EQ_INT(admit_team(l, 2, &none, &team, 0, T0, &h, &th, &level), QUOTA_OK);
	CHECK_EQ_INT(h.key_id, 0);                     /* the key itself holds nothing */
	CHECK_EQ_INT(admit_team(l, 1, &key, &team, 0, T0, &h, &th, &level), QUOTA_RPM);
	CHECK_EQ_INT(level, 1);
	CHECK_EQ_INT(h.key_id, 0);
	CHECK_EQ_INT(th.key_id, 0);
	/* Key 1 took one of its 3: the refused one came back, 2 are left. */
	CHECK_EQ_INT(admit(l, 1, &key, 0, 0, T0), QUOTA_OK);
	CHECK_EQ_INT(admit(l, 1, &key, 0, 0, T0), QUOTA_OK);
	CHECK_EQ_INT(admit(l, 1, &key, 0, 0, T0), QUOTA_RPM);
	/* A key without a limit of its own shows its team's figures. */
	CHECK_EQ_INT(admit_levels(l, 2, &none, 5, &team, 0, T0 + 30000, &h, &th, &st, &level),
	             QUOTA_OK);
	CHECK_EQ_INT(st.limit_requests, 2);
	CHECK_EQ_INT(st.remaining_requests, 0);
	/* A key with a budget alone shows its team's rates too. */
	{
		struct quota_cfg budget = cfg_of(0, 0, 0, 1000000, QUOTA_PERIOD_DAY);

		CHECK_EQ_INT(admit_levels(l, 3, &budget, 5, &team, 0, T0 + 60000, &h, &th, &st,
		                          &level), QUOTA_OK);
		CHECK_EQ_INT(st.limit_requests, 2);
	}
	/* No team, or a team without limits: the key alone. */
	CHECK_EQ_INT(admit_levels(l, 2, &none, 0, NULL, 0, T0, &h, &th, &st, &level), QUOTA_OK);
	CHECK_EQ_INT(admit_team(l, 2, &none, &none, 0, T0, &h, &th, &level), QUOTA_OK);
	CHECK_EQ_INT(th.key_id, 0);
	quota_free(l);
}

static void test_team_budget_and_slots(void)
{
	struct quota *l = quota_new();
	struct quota_cfg key = cfg_of(0, 0, 1, 1000, QUOTA_PERIOD_DAY);
	struct quota_cfg team = cfg_of(0, 0, 2, 100, QUOTA_PERIOD_DAY);
	struct quota_hold h1, t1, h2, t2, h3, t3;
	int level;

	CHECK_EQ_INT(admit_team(l, 1, &key, &team, 60, T0, &h1, &t1, &level), QUOTA_OK);
	/* 60 reserved of the team's 100: key 2's 60 does not fit, at the team. */
	CHECK_EQ_INT(admit_team(l, 2, &key, &team, 60, T0, &h2, &t2, &level), QUOTA_BUDGET);
	CHECK_EQ_INT(level, 1);
	/* Key 2's slot came back: its one request in flight is free. */
	CHECK_EQ_INT(admit_team(l, 2, &key, &team, 10, T0, &h2, &t2, &level), QUOTA_OK);
	/* The team's 2 slots are taken (keys 1 and 2). */
	quota_settle(l, &h2, -1, 10, T0);
	CHECK_EQ_INT(admit_team(l, 2, &key, &team, 1, T0, &h3, &t3, &level), QUOTA_CONCURRENCY);
	CHECK_EQ_INT(level, 1);
	quota_settle(l, &t2, -1, 10, T0);
	/* Key 1's request cost 30, not 60: spent 10 + 30, so 60 fits again. */
	quota_settle(l, &h1, -1, 30, T0);
	quota_settle(l, &t1, -1, 30, T0);
	CHECK_EQ_INT(admit_team(l, 2, &key, &team, 60, T0, &h3, &t3, &level), QUOTA_OK);
	quota_settle(l, &h3, -1, 60, T0);
	quota_settle(l, &t3, -1, 60, T0);
	/* 100 spent: the team refuses even a request of unknown cost. */
	CHECK_EQ_INT(admit_team(l, 1, &key, &team, 0, T0, &h1, &t1, &level), QUOTA_BUDGET);
	CHECK_EQ_INT(level, 1);
	/* The next day starts from nothing at both levels. */
	CHECK_EQ_INT(admit_team(l, 1, &key, &team, 100, T0 + DAY, &h1, &t1, &level), QUOTA_OK);
	/* The key refuses first when both would: the key's level is named. */
	CHECK_EQ_INT(admit_team(l, 1, &key, &team, 0, T0 + DAY, &h2, &t2, &level),
	             QUOTA_CONCURRENCY);
	CHECK_EQ_INT(level, 0);
	quota_free(l);
}

/* Tags' budgets after the key (quota_admit_all): every level admits the request or
 * none holds it; what one spends counts at each tag, whatever key spent it. Returns
 * the number of levels admitted at (n when all). */
static size_t admit_tags(struct quota *l, const struct quota_cfg *key, size_t ntags,
                         const struct quota_cfg *const *cfgs, int64_t cost,
                         struct quota_hold *h, struct quota_status *st)
{
	struct quota_subject at[3] = { { 9, key, &h[0], 0, NULL } };
	size_t i, refused;

	for (i = 0; i < ntags; i++)
		at[1 + i] = (struct quota_subject){ quota_tag_subject((int64_t)i + 1), cfgs[i],
		                                    &h[1 + i], 0, NULL };
	return quota_admit_all(l, at, 1 + ntags, 0, cost, T0, st, &refused) == QUOTA_OK
	       ? 1 + ntags : refused;
}

/* quota_subject_level reads back what each level's subject id encodes. */
static void test_subject_levels(void)
{
	int64_t id = 0;

	CHECK_EQ_INT(quota_subject_level(7, &id), QUOTA_LEVEL_KEY);
	CHECK_EQ_INT(id, 7);
	CHECK_EQ_INT(quota_subject_level(quota_team_subject(QUOTA_TAG_SUBJECTS - 1), &id),
	             QUOTA_LEVEL_TEAM);
	CHECK_EQ_INT(id, QUOTA_TAG_SUBJECTS - 1);
	CHECK_EQ_INT(quota_subject_level(quota_tag_subject(1), &id), QUOTA_LEVEL_TAG);
	CHECK_EQ_INT(id, 1);
	/* The largest tag budget id the keytable takes stays a tag's. */
	CHECK_EQ_INT(quota_subject_level(quota_tag_subject(QUOTA_TAG_SUBJECTS - 1), &id),
	             QUOTA_LEVEL_TAG);
	CHECK_EQ_INT(quota_subject_level(quota_end_user_subject(0), &id), QUOTA_LEVEL_END_USER);
	CHECK_EQ_INT(id, 0);
	/* Every 64-bit hash is an end user's subject, never INT64_MIN (no negation of it). */
	CHECK_EQ_INT(quota_subject_level(quota_end_user_subject(UINT64_MAX), &id),
	             QUOTA_LEVEL_END_USER);
	CHECK_EQ_INT(id, QUOTA_END_USER_SUBJECTS - 1);
	CHECK(quota_end_user_subject(UINT64_MAX) == -INT64_MAX);
}

static void test_tag_budgets(void)
{
	struct quota *l = quota_new();
	struct quota_cfg key = cfg_of(0, 0, 0, 1000, QUOTA_PERIOD_DAY);
	struct quota_cfg a = cfg_of(0, 0, 0, 100, QUOTA_PERIOD_MONTH);
	struct quota_cfg b = cfg_of(0, 0, 0, 1000, QUOTA_PERIOD_DAY);
	const struct quota_cfg *cfgs[2] = { &a, &b };
	int64_t tag1 = quota_tag_subject(1), tag2 = quota_tag_subject(2);
	struct quota_hold h[3], h2[3];
	struct quota_status st;

	CHECK(tag1 < quota_team_subject(QUOTA_TAG_SUBJECTS - 1));
	CHECK_EQ_INT(admit_tags(l, &key, 2, cfgs, 60, h, &st), 3);
	CHECK(h[0].key_id == 9 && h[1].key_id == tag1 && h[2].key_id == tag2);
	/* 60 of tag 1's 100 reserved: 60 more is refused there; the key and tag 2 hold
	 * nothing. */
	CHECK_EQ_INT(admit_tags(l, &key, 2, cfgs, 60, h2, &st), 1);
	CHECK(h2[0].key_id == 0 && h2[1].key_id == 0 && h2[2].key_id == 0);
	CHECK(st.retry_after_s > 0);
	/* Refused at tag 2: tag 1's hold and the key's are given back. */
	quota_set_spent(l, tag2, QUOTA_PERIOD_DAY, NULL, 0,
	                quota_period_start(QUOTA_PERIOD_DAY, NULL, T0), 990);
	CHECK_EQ_INT(admit_tags(l, &key, 2, cfgs, 30, h2, &st), 2);
	CHECK(h2[0].key_id == 0 && h2[1].key_id == 0);
	quota_settle(l, &h[0], -1, 60, T0);
	quota_settle(l, &h[1], -1, 60, T0);
	quota_settle(l, &h[2], -1, 60, T0);
	/* 60 spent at tag 1: 40 fit there, 41 do not; a refused admission took nothing,
	 * at the key either (60 spent of its 1000, none held: 940 fit without tags). */
	quota_set_spent(l, tag2, QUOTA_PERIOD_DAY, NULL, 0,
	                quota_period_start(QUOTA_PERIOD_DAY, NULL, T0), 0);
	CHECK_EQ_INT(admit_tags(l, &key, 1, cfgs, 41, h2, &st), 1);
	CHECK_EQ_INT(admit_tags(l, &key, 0, cfgs, 941, h2, &st), 0);
	CHECK_EQ_INT(admit_tags(l, &key, 0, cfgs, 940, h2, &st), 1);
	quota_cancel(l, &h2[0]);
	CHECK_EQ_INT(admit_tags(l, &key, 1, cfgs, 40, h2, &st), 2);
	quota_free(l);
}

int main(void)
{
	RUN(test_unlimited);
	RUN(test_rpm);
	RUN(test_rpm_bound);
	RUN(test_tpm);
	RUN(test_settle_tokens);
	RUN(test_concurrency);
	RUN(test_period_arithmetic);
	RUN(test_period_weeks);
	RUN(test_budget_day);
	RUN(test_budget_week);
	RUN(test_budget_month);
	RUN(test_budget_total);
	RUN(test_budget_reseed);
	RUN(test_combined);
	RUN(test_live_change);
	RUN(test_oversized);
	RUN(test_status);
	RUN(test_peek);
	RUN(test_clamps);
	RUN(test_many_keys);
	RUN(test_threads_rpm);
	RUN(test_threads_concurrency);
	RUN(test_subject_levels);
	RUN(test_tag_budgets);
	RUN(test_team_rates);
	RUN(test_team_budget_and_slots);
	RUN(test_budget_zone);
	RUN(test_budget_zone_read_again);
	RUN(test_budget_zone_new_rules);
	return UNIT_DONE();
}
