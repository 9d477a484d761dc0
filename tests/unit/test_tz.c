/* Unit tests of tz: zone names, TZif files as the system holds them and as a peer could
 * spoil them, and local periods (boundaries, skipped and repeated midnights, footers).
 * With arguments, `test_tz periods ZONE MS...` prints each instant's day, week and month
 * as "start end" triples for tests/test_tz.py, which compares them with Python's
 * zoneinfo over every zone of the system. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tz.h"
#include "unit.h"

#define H 3600000LL
#define D (24 * H)

static const struct tz *zone(const char *name)
{
	char err[256];
	const struct tz *z = tz_get(name, err, sizeof(err));

	if (!z)
		fprintf(stderr, "%s\n", err);
	return z;
}

static void test_names(void)
{
	CHECK(tz_name_ok("UTC"));
	CHECK(tz_name_ok("America/Argentina/Buenos_Aires"));
	CHECK(tz_name_ok("Etc/GMT+5"));
	CHECK(tz_name_ok("America/Port-au-Prince"));
	CHECK(!tz_name_ok(""));
	CHECK(!tz_name_ok("/etc/passwd"));
	CHECK(!tz_name_ok("../../etc/passwd"));
	CHECK(!tz_name_ok("Europe/../../etc/passwd"));
	CHECK(!tz_name_ok("Europe/./Paris"));
	CHECK(!tz_name_ok("Europe//Paris"));
	CHECK(!tz_name_ok("Europe/"));
	CHECK(!tz_name_ok(".hidden"));
	CHECK(!tz_name_ok("Europe/Paris\n"));
	CHECK(!tz_name_ok("Europe Paris"));
	CHECK(!tz_name_ok("Europe/Paris;rm"));
	CHECK(!tz_name_ok("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"));
	CHECK(tz_name_ok("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"));
}

static void test_get(void)
{
	char err[256];
	const struct tz *a = zone("Europe/Paris"), *b = zone("Europe/Paris");

	CHECK(a != NULL);
	CHECK(a == b);                    /* read once */
	CHECK_EQ_STR(tz_name(a), "Europe/Paris");
	CHECK(tz_get("Mars/Olympus_Mons", err, sizeof(err)) == NULL);
	CHECK(strstr(err, "no such zone") != NULL);
	CHECK(tz_get("../etc/passwd", err, sizeof(err)) == NULL);
	CHECK(strstr(err, "not a zone name") != NULL);
	CHECK(tz_get("Europe", err, sizeof(err)) == NULL);     /* a directory */
	CHECK(tz_get("zone.tab", err, sizeof(err)) == NULL);   /* a file, not TZif */
	CHECK(strstr(err, "not a TZif file") != NULL);
}

/* A TZif file of version 2 with no transition and one type of offset off, its v1 part
 * empty, then footer: len returned. */
static size_t tzif(unsigned char *buf, int32_t off, const char *footer, int leaps)
{
	size_t p = 0;

	for (int part = 0; part < 2; part++) {
		unsigned char h[44] = "TZif2";
		uint32_t counts[6] = { 0, 0, part ? (uint32_t)leaps : 0, 0, part ? 1 : 0,
		                       part ? 4 : 0 };

		for (int i = 0; i < 6; i++)
			for (int j = 0; j < 4; j++)
				h[20 + 4 * i + j] = (unsigned char)(counts[i] >> (24 - 8 * j));
		memcpy(buf + p, h, sizeof(h));
		p += sizeof(h);
	}
	for (int j = 0; j < 4; j++)
		buf[p++] = (unsigned char)((uint32_t)off >> (24 - 8 * j));
	buf[p++] = 0;
	buf[p++] = 0;
	memcpy(buf + p, "ABC", 4);
	p += 4;
	for (int i = 0; i < leaps; i++) {
		memset(buf + p, 0, 12);
		p += 12;
	}
	buf[p++] = '\n';
	memcpy(buf + p, footer, strlen(footer));
	p += strlen(footer);
	buf[p++] = '\n';
	return p;
}

static void test_parse(void)
{
	unsigned char buf[512];
	size_t len = tzif(buf, -18000, "EST5EDT,M3.2.0,M11.1.0", 0);
	struct tz *z = tz_parse(buf, len);

	CHECK(z != NULL);
	/* 2026-03-08 07:00Z: New York's clocks go forward; 2026-11-01 06:00Z: back. */
	CHECK_EQ_INT(tz_offset(z, 1772953199), -18000);
	CHECK_EQ_INT(tz_offset(z, 1772953200), -14400);
	CHECK_EQ_INT(tz_offset(z, 1793512799), -14400);
	CHECK_EQ_INT(tz_offset(z, 1793512800), -18000);
	tz_free(z);
	/* what a file may not be */
	CHECK(tz_parse(buf, len - 1) == NULL);              /* no final newline */
	CHECK(tz_parse(buf, 43) == NULL);
	buf[4] = 0;                                         /* version 1 */
	CHECK(tz_parse(buf, len) == NULL);
	len = tzif(buf, -18000, "EST5EDT", 0);               /* daylight time without rules */
	CHECK(tz_parse(buf, len) == NULL);
	len = tzif(buf, -18000, "EST5EDT,M13.2.0,M11.1.0", 0);
	CHECK(tz_parse(buf, len) == NULL);
	len = tzif(buf, -18000, "EST5EDT,M3.2.0,M11.1.0x", 0);
	CHECK(tz_parse(buf, len) == NULL);
	len = tzif(buf, -18000, "ES5", 0);                   /* abbreviations have 3 letters */
	CHECK(tz_parse(buf, len) == NULL);
	len = tzif(buf, 0, "UTC0", 1);                        /* leap seconds */
	CHECK(tz_parse(buf, len) == NULL);
	len = tzif(buf, 100000, "UTC0", 0);                   /* an offset past 26 h */
	CHECK(tz_parse(buf, len) == NULL);
	/* angle brackets, a southern rule, a time past midnight */
	len = tzif(buf, -10800, "<-03>3<-02>,M9.1.6/24,M4.1.6/24", 0);
	CHECK((z = tz_parse(buf, len)) != NULL);
	CHECK_EQ_INT(tz_offset(z, 1767225600), -7200);        /* 2026-01-01: summer */
	CHECK_EQ_INT(tz_offset(z, 1782864000), -10800);       /* 2026-07-01: winter */
	tz_free(z);
	len = tzif(buf, 19800, "IST-5:30", 0);
	CHECK((z = tz_parse(buf, len)) != NULL);
	CHECK_EQ_INT(tz_offset(z, 0), 19800);
	CHECK_EQ_INT(tz_period_start_ms(z, PERIOD_DAY, 1796581800000LL), 1796581800000LL);
	CHECK_EQ_INT(tz_period_start_ms(z, PERIOD_DAY, 1796581799999LL), 1796581800000LL - D);
	tz_free(z);
}

static void test_periods(void)
{
	const struct tz *ny = zone("America/New_York"), *in = zone("Asia/Kolkata"),
	                *np = zone("Asia/Kathmandu"), *cl = zone("America/Santiago");
	int64_t t;

	CHECK(ny && in && np && cl);
	if (!ny || !in || !np || !cl)
		return;
	/* 2026-12-07 12:00Z: New York's day began at 05:00Z, Kolkata's at 18:30Z the day
	 * before, Kathmandu's at 18:15Z. */
	t = 1796644800000LL;
	CHECK_EQ_INT(tz_period_start_ms(ny, PERIOD_DAY, t), 1796619600000LL);
	CHECK_EQ_INT(tz_period_end_ms(ny, PERIOD_DAY, t), 1796619600000LL + D);
	CHECK_EQ_INT(tz_period_start_ms(in, PERIOD_DAY, t), 1796581800000LL);
	CHECK_EQ_INT(tz_period_start_ms(np, PERIOD_DAY, t), 1796580900000LL);
	/* Kolkata's December began on 2026-11-30 at 18:30Z; its week on Monday the 7th. */
	CHECK_EQ_INT(tz_period_start_ms(in, PERIOD_MONTH, t), 1796063400000LL);
	CHECK_EQ_INT(tz_period_start_ms(in, PERIOD_WEEK, t), 1796581800000LL);
	CHECK_EQ_INT(tz_period_end_ms(in, PERIOD_MONTH, t), 1798741800000LL);
	/* A day of 23 hours: New York on 2026-03-08 (05:00Z to 04:00Z). */
	CHECK_EQ_INT(tz_period_end_ms(ny, PERIOD_DAY, 1772946000000LL) - 1772946000000LL, 23 * H);
	/* Santiago skips its midnight on 2026-09-06: the day begins at the change, 04:00Z
	 * (01:00 local), and the one before it lasted 24 hours. */
	CHECK_EQ_INT(tz_period_start_ms(cl, PERIOD_DAY, 1788670800000LL), 1788667200000LL);
	CHECK_EQ_INT(tz_period_end_ms(cl, PERIOD_DAY, 1788667199999LL), 1788667200000LL);
	CHECK_EQ_INT(tz_period_end_ms(cl, PERIOD_DAY, 1788667200000LL) - 1788667200000LL, 23 * H);
	/* NULL is UTC; total is all time. */
	CHECK_EQ_INT(tz_period_start_ms(NULL, PERIOD_DAY, t), 1796601600000LL);
	CHECK_EQ_INT(tz_period_start_ms(in, PERIOD_TOTAL, t), 0);
	CHECK(tz_period_end_ms(in, PERIOD_TOTAL, t) == INT64_MAX);
	/* Past the last transition of the file (2037): its footer. */
	CHECK_EQ_INT(tz_offset(ny, 2210198400LL), -18000);   /* 2040-01-15 */
	CHECK_EQ_INT(tz_offset(ny, 2224713600LL), -14400);   /* 2040-07-01 */
}

/* Periods tile time in every zone of a sample, around every hour of two years. */
static void test_tiling(void)
{
	static const char *const names[] = { "America/New_York", "Europe/London", "Asia/Kolkata",
		"Australia/Lord_Howe", "America/Santiago", "Pacific/Chatham", "Africa/Casablanca",
		"Asia/Tehran", "America/St_Johns", "Pacific/Apia", "UTC" };

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const struct tz *z = zone(names[i]);
		int bad = 0;

		CHECK(z != NULL);
		for (int64_t t = 1767225600000LL; z && t < 1767225600000LL + 730 * D; t += H - 1) {
			for (enum period_kind k = PERIOD_DAY; k <= PERIOD_MONTH; k++) {
				int64_t s = tz_period_start_ms(z, k, t), e = tz_period_end_ms(z, k, t);

				if (!(s <= t && t < e) || tz_period_start_ms(z, k, e) != e ||
				    tz_period_end_ms(z, k, s) != e || tz_period_start_ms(z, k, e - 1) != s)
					bad++;
			}
		}
		if (bad)
			fprintf(stderr, "%s: %d periods that do not tile\n", names[i], bad);
		CHECK_EQ_INT(bad, 0);
	}
}

/* `test_tz periods ZONE MS...` */
static int test_tz_print(int argc, char **argv)
{
	const struct tz *z = zone(argv[2]);

	if (!z)
		return 1;
	for (int i = 3; i < argc; i++) {
		int64_t ms = strtoll(argv[i], NULL, 10);

		for (enum period_kind k = PERIOD_DAY; k <= PERIOD_MONTH; k++)
			printf("%lld %lld%c", (long long)tz_period_start_ms(z, k, ms),
			       (long long)tz_period_end_ms(z, k, ms), k == PERIOD_MONTH ? '\n' : ' ');
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 3 && strcmp(argv[1], "periods") == 0)
		return test_tz_print(argc, argv);
	RUN(test_names);
	RUN(test_get);
	RUN(test_parse);
	RUN(test_periods);
	RUN(test_tiling);
	return UNIT_DONE();
}
