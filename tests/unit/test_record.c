/* Unit tests of record: framing on the TCP ring connection and parsing of HAProxy's
 * end-of-transaction records, real ones and edited ones. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "gwsecret.h"
#include "record.h"
#include "record_lines.h"
#include "unit.h"

#define LINE_MAX_LEN 8192

/* A record built per the log-format (haproxy/tally.cfg), fields 0..32; the capture
 * (field 33) is appended separately. */
static const char *const base_fields[33] = {
	"tally2", REC_MAC, REC_NONCE, REC_NMAC, "0b6f2d0e-1c7e-4a55-9d2c-2f4f1a9d0c11", "1796278643", "040", "200", "342",
	"555", "3", "0", "0", "2", "5", "--", "be_mock_openai", "allow", "7", "gpt-4o",
	"openai", "0", "-", "-", "gpt-4o-2024-08-06", "1000", "500", "200", "50", "-", "-",
	"-", "-",
};

/* The base record with field `which` (0..33) replaced by value; field 33 is the
 * capture ("-" when value is NULL and which != 33). */
static size_t line_with(char *buf, int which, const char *value)
{
	size_t n = 0;
	int i;

	for (i = 0; i < 34; i++) {
		const char *v = i == which ? value : i < 33 ? base_fields[i] : "-";

		n += (size_t)snprintf(buf + n, LINE_MAX_LEN - n, "%s%s", i ? " " : "", v);
	}
	return n;
}

/* The record's views borrow the line: it lives until the next call. */
static int parse_with(int which, const char *value, struct record *r)
{
	static char buf[LINE_MAX_LEN];
	size_t n = line_with(buf, which, value);

	return record_parse(buf, n, r);
}

static int parse_str(const char *s, struct record *r)
{
	return record_parse(s, strlen(s), r);
}

static int str_is(struct record_str s, const char *want)
{
	return s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0;
}

static void test_frame_newline(void)
{
	const char *msg = NULL;
	size_t mlen = 0, used = 0;
	const char two[] = "tally1 a\ntally1 b\n";

	CHECK_EQ_INT(record_frame_next("", 0, 100, &msg, &mlen, &used), 0);
	CHECK_EQ_INT(record_frame_next("tally1 a", 8, 100, &msg, &mlen, &used), 0);
	CHECK_EQ_INT(record_frame_next(two, sizeof(two) - 1, 100, &msg, &mlen, &used), 1);
	CHECK(msg == two && mlen == 8 && used == 9);
	CHECK_EQ_INT(record_frame_next(two + used, sizeof(two) - 1 - used, 100, &msg, &mlen, &used), 1);
	CHECK(mlen == 8 && memcmp(msg, "tally1 b", 8) == 0 && used == 9);
	/* An empty line is a record of its own (record_parse refuses it). */
	CHECK_EQ_INT(record_frame_next("\nx", 2, 100, &msg, &mlen, &used), 1);
	CHECK(mlen == 0 && used == 1);
}

static void test_frame_newline_limits(void)
{
	char buf[40];
	const char *msg;
	size_t mlen, used;

	memset(buf, 'x', sizeof(buf));
	/* exactly max_len bytes and its newline: one record */
	buf[10] = '\n';
	CHECK_EQ_INT(record_frame_next(buf, 11, 10, &msg, &mlen, &used), 1);
	CHECK(mlen == 10 && used == 11);
	/* one byte more without a newline: broken, whatever follows */
	CHECK_EQ_INT(record_frame_next(buf, 11, 9, &msg, &mlen, &used), -1);
	buf[10] = 'x';
	CHECK_EQ_INT(record_frame_next(buf, 10, 10, &msg, &mlen, &used), 0);
	CHECK_EQ_INT(record_frame_next(buf, 11, 10, &msg, &mlen, &used), -1);
	CHECK_EQ_INT(record_frame_next(buf, sizeof(buf), 10, &msg, &mlen, &used), -1);
}

static void test_frame_octet_counted(void)
{
	const char *msg = NULL;
	size_t mlen = 0, used = 0;
	const char one[] = "8 tally1 a8 tally1 b";

	CHECK_EQ_INT(record_frame_next(one, sizeof(one) - 1, 100, &msg, &mlen, &used), 1);
	CHECK(msg == one + 2 && mlen == 8 && used == 10);
	CHECK_EQ_INT(record_frame_next(one + 10, 10, 100, &msg, &mlen, &used), 1);
	CHECK(memcmp(msg, "tally1 b", 8) == 0);
	/* partial: the count, the space, the message */
	CHECK_EQ_INT(record_frame_next("1", 1, 100, &msg, &mlen, &used), 0);
	CHECK_EQ_INT(record_frame_next("12", 2, 100, &msg, &mlen, &used), 0);
	CHECK_EQ_INT(record_frame_next("12 ", 3, 100, &msg, &mlen, &used), 0);
	CHECK_EQ_INT(record_frame_next("12 tally1", 9, 100, &msg, &mlen, &used), 0);
	CHECK_EQ_INT(record_frame_next("0", 1, 100, &msg, &mlen, &used), 0);
	/* a message may hold newlines: the count rules */
	CHECK_EQ_INT(record_frame_next("3 a\nb", 5, 100, &msg, &mlen, &used), 1);
	CHECK(mlen == 3 && used == 5);
	/* exactly max_len, and one more */
	CHECK_EQ_INT(record_frame_next("3 abc", 5, 3, &msg, &mlen, &used), 1);
	CHECK_EQ_INT(record_frame_next("4 abcd", 6, 3, &msg, &mlen, &used), -1);
	/* the count alone says it is too long: no need to wait for the bytes */
	CHECK_EQ_INT(record_frame_next("65537 ", 6, 65536, &msg, &mlen, &used), -1);
}

static void test_frame_octet_garbage(void)
{
	const char *msg;
	size_t mlen, used;

	CHECK_EQ_INT(record_frame_next("0 ", 2, 100, &msg, &mlen, &used), -1);
	CHECK_EQ_INT(record_frame_next("05 abcde", 8, 100, &msg, &mlen, &used), -1);
	CHECK_EQ_INT(record_frame_next("5x abcde", 8, 100, &msg, &mlen, &used), -1);
	CHECK_EQ_INT(record_frame_next("5\nabcde", 7, 100, &msg, &mlen, &used), -1);
	CHECK_EQ_INT(record_frame_next("5  abcd", 7, 100, &msg, &mlen, &used), 1);
	CHECK(mlen == 5 && msg[0] == ' ');
	/* ten digits: refused before any overflow, even with a huge max_len */
	CHECK_EQ_INT(record_frame_next("1000000000 x", 12, SIZE_MAX, &msg, &mlen, &used), -1);
	CHECK_EQ_INT(record_frame_next("99999999999999999999999", 23, SIZE_MAX, &msg, &mlen, &used),
	             -1);
	CHECK_EQ_INT(record_frame_next("999999999 ", 10, SIZE_MAX, &msg, &mlen, &used), 0);
}

static void test_real_unary(void)
{
	struct record r;

	CHECK_EQ_INT(parse_str(REAL_OPENAI_UNARY, &r), 0);
	CHECK(str_is(r.id, "3433c753-3df1-4ef6-9db7-2fdb386e6966"));
	CHECK_EQ_INT(r.accept_s, 1796278643);
	CHECK_EQ_INT(r.accept_ms, 552);
	CHECK_EQ_INT(r.status, 200);
	CHECK_EQ_INT(r.bytes_in, 342);
	CHECK_EQ_INT(r.bytes_out, 555);
	CHECK_EQ_INT(r.tr, 3);
	CHECK_EQ_INT(r.tw, 0);
	CHECK_EQ_INT(r.tc, 0);
	CHECK_EQ_INT(r.tr_server, 2);
	CHECK_EQ_INT(r.ta, 5);
	CHECK(str_is(r.termination, "--"));
	CHECK(str_is(r.backend, "be_mock_openai"));
	CHECK(str_is(r.verdict, "allow"));
	CHECK_EQ_INT(r.key_id, 1);
	CHECK_EQ_STR(r.model, "mock-gpt");
	CHECK_EQ_STR(r.provider, "mock-openai");
	CHECK_EQ_INT(r.stream, 0);
	CHECK_EQ_INT(r.skipped, 0);
	CHECK_EQ_INT(r.spoe_error, ACCT_NONE);
	CHECK_EQ_STR(r.u_model, "mock-gpt");
	CHECK_EQ_INT(r.u[RECORD_U_PROMPT], 1000);
	CHECK_EQ_INT(r.u[RECORD_U_COMPLETION], 500);
	CHECK_EQ_INT(r.u[RECORD_U_CACHED], 200);
	CHECK_EQ_INT(r.u[RECORD_U_REASONING], 50);
	CHECK_EQ_INT(r.u[RECORD_U_INPUT], ACCT_NONE);
	CHECK_EQ_INT(r.u[RECORD_U_OUTPUT], ACCT_NONE);
	CHECK_EQ_INT(r.u[RECORD_U_CACHE_READ], ACCT_NONE);
	CHECK_EQ_INT(r.u[RECORD_U_CACHE_CREATION], ACCT_NONE);
	CHECK_EQ_INT(r.has_capture, 0);

	CHECK_EQ_INT(parse_str(REAL_ANTHROPIC_UNARY, &r), 0);
	CHECK_EQ_INT(r.u[RECORD_U_PROMPT], ACCT_NONE);
	CHECK_EQ_INT(r.u[RECORD_U_INPUT], 100);
	CHECK_EQ_INT(r.u[RECORD_U_OUTPUT], 20);
	CHECK(str_is(r.backend, "be_mock_anthropic"));
}

static void test_real_streams(void)
{
	struct record r;

	const char *line = REAL_ANTHROPIC_STREAM;

	CHECK_EQ_INT(parse_str(line, &r), 0);
	CHECK_EQ_INT(r.stream, 1);
	CHECK(r.has_capture && r.cap_kind == 's');
	CHECK_EQ_INT(r.body_bytes, 1064);
	CHECK(memcmp(r.summary.ptr, "{\"n\":", 5) == 0);
	CHECK(r.summary.ptr + r.summary.len == line + strlen(line));
	CHECK_EQ_INT(r.u[RECORD_U_INPUT], ACCT_NONE);

	CHECK_EQ_INT(parse_str(REAL_OPENAI_LONG_STREAM, &r), 0);
	CHECK(r.has_capture && r.cap_kind == 's');
	CHECK_EQ_INT(r.body_bytes, 51396);
	CHECK(r.summary.len > 0 && r.summary.ptr[r.summary.len - 1] == '}');

	/* An upstream that closed before the filter saw a byte: no capture field. */
	CHECK_EQ_INT(parse_str(REAL_ANTHROPIC_CUT_NO_CAPTURE, &r), 0);
	CHECK(str_is(r.termination, "SD"));
	CHECK_EQ_INT(r.has_capture, 0);

	/* A trailing newline (TCP framing leftovers) is allowed. */
	{
		char buf[LINE_MAX_LEN];
		size_t n = (size_t)snprintf(buf, sizeof(buf), "%s\n", REAL_OPENAI_STREAM);

		CHECK_EQ_INT(record_parse(buf, n, &r), 0);
		CHECK(r.summary.len > 0 && r.summary.ptr[r.summary.len - 1] == '}');
	}
}

static void test_gateway_answers(void)
{
	struct record r;

	/* HAProxy answered alone (no agent variables): every optional field is "-". */
	CHECK_EQ_INT(parse_str("tally2 " REC_MAC " " REC_NONCE " " REC_NMAC " 0b6f2d0e 1796278643 001 503 120 260 0 -1 -1 -1 1 PR "
	                       "gateway - - - - - 1 - - - - - - - - - - -", &r), 0);
	CHECK_EQ_INT(r.verdict.len, 0);
	CHECK_EQ_INT(r.key_id, ACCT_NONE);
	CHECK_EQ_STR(r.model, "");
	CHECK_EQ_STR(r.provider, "");
	CHECK_EQ_INT(r.stream, ACCT_NONE);
	CHECK_EQ_INT(r.skipped, 1);
	CHECK_EQ_INT(r.tw, -1);
	CHECK_EQ_STR(r.u_model, "");
	CHECK_EQ_INT(r.u[RECORD_U_PROMPT], ACCT_NONE);
	/* A connection that never made a request: no id. */
	CHECK_EQ_INT(parse_str("tally2 - - - - 1796278643 040 400 0 0 -1 -1 -1 -1 0 CR gateway - - - "
	                       "- - - - - - - - - - - - - -", &r), -1);
	/* A status HAProxy never had */
	CHECK_EQ_INT(parse_with(7, "-1", &r), 0);
	CHECK_EQ_INT(r.status, -1);
}

static void test_url_encoded_names(void)
{
	struct record r;

	/* As HAProxy's url_enc printed "a+b c/d%é\"q\\z" (a model the mock named). */
	CHECK_EQ_INT(parse_with(19, "a%2Bb%20c%2Fd%25%C3%A9%22q%5Cz", &r), 0);
	CHECK_EQ_STR(r.model, "a+b c/d%\xc3\xa9\"q\\z");
	CHECK_EQ_INT(parse_with(24, "a%2Bb%20c%2Fd%25%C3%A9%22q%5Cz", &r), 0);
	CHECK_EQ_STR(r.u_model, "a+b c/d%\xc3\xa9\"q\\z");
	/* '+' is not form encoding's space: percent-encoding only */
	CHECK_EQ_INT(parse_with(20, "a+b", &r), 0);
	CHECK_EQ_STR(r.provider, "a+b");
	CHECK_EQ_INT(parse_with(19, "%61%62", &r), 0);
	CHECK_EQ_STR(r.model, "ab");
	/* broken escapes, control bytes, NUL */
	CHECK_EQ_INT(parse_with(19, "abc%4", &r), -1);
	CHECK_EQ_INT(parse_with(19, "abc%", &r), -1);
	CHECK_EQ_INT(parse_with(19, "%zz", &r), -1);
	CHECK_EQ_INT(parse_with(19, "a%0Ab", &r), -1);
	CHECK_EQ_INT(parse_with(19, "a%00b", &r), -1);
	CHECK_EQ_INT(parse_with(20, "a%7Fb", &r), -1);
}

static void test_upstream_model_is_lenient(void)
{
	struct record r;
	char name[3 * ACCT_NAME_MAX + 1];
	size_t i;

	/* The upstream names its model: an unstorable name is dropped, not the record. */
	CHECK_EQ_INT(parse_with(24, "gpt%0A", &r), 0);
	CHECK_EQ_STR(r.u_model, "");
	CHECK_EQ_INT(r.u[RECORD_U_PROMPT], 1000);
	CHECK_EQ_INT(parse_with(24, "%0", &r), 0);
	CHECK_EQ_STR(r.u_model, "");
	for (i = 0; i < ACCT_NAME_MAX; i++)
		name[i] = 'm';
	name[ACCT_NAME_MAX] = '\0';
	CHECK_EQ_INT(parse_with(24, name, &r), 0);
	CHECK_EQ_STR(r.u_model, "");
	name[ACCT_NAME_MAX - 1] = '\0';
	CHECK_EQ_INT(parse_with(24, name, &r), 0);
	CHECK_EQ_INT(strlen(r.u_model), ACCT_NAME_MAX - 1);
	/* the configured model is ours: too long is a broken record */
	name[ACCT_NAME_MAX - 1] = 'm';
	CHECK_EQ_INT(parse_with(19, name, &r), -1);
	/* encoded, three bytes a character: the decoded length is what counts */
	for (i = 0; i < ACCT_NAME_MAX - 1; i++)
		memcpy(name + 3 * i, "%41", 3);
	name[3 * (ACCT_NAME_MAX - 1)] = '\0';
	CHECK_EQ_INT(parse_with(19, name, &r), 0);
	CHECK_EQ_INT(strlen(r.model), ACCT_NAME_MAX - 1);
	CHECK(r.model[0] == 'A');
}

static void test_numbers(void)
{
	struct record r;

	CHECK_EQ_INT(parse_with(5, "0", &r), 0);
	CHECK_EQ_INT(parse_with(5, "9007199254740991", &r), 0);
	CHECK_EQ_INT(r.accept_s, 9007199254740991LL);
	/* malformed */
	CHECK_EQ_INT(parse_with(5, "", &r), -1);
	CHECK_EQ_INT(parse_with(5, "-", &r), -1);
	CHECK_EQ_INT(parse_with(5, "+5", &r), -1);
	CHECK_EQ_INT(parse_with(5, "5a", &r), -1);
	CHECK_EQ_INT(parse_with(5, "0x10", &r), -1);
	CHECK_EQ_INT(parse_with(5, "1.5", &r), -1);
	CHECK_EQ_INT(parse_with(5, "--1", &r), -1);
	/* overflow, and values whose sums could overflow downstream */
	CHECK_EQ_INT(parse_with(5, "9007199254740992", &r), -1);
	CHECK_EQ_INT(parse_with(5, "9223372036854775807", &r), -1);
	CHECK_EQ_INT(parse_with(5, "9223372036854775808", &r), -1);
	CHECK_EQ_INT(parse_with(5, "99999999999999999999", &r), -1);
	CHECK_EQ_INT(parse_with(13, "-9223372036854775808", &r), -1);
	CHECK_EQ_INT(parse_with(11, "9007199254740991", &r), 0);
	CHECK_EQ_INT(parse_with(11, "9007199254740992", &r), -1);
	/* negatives: accept time and bytes never; timers -1 (not reached) only */
	CHECK_EQ_INT(parse_with(5, "-1", &r), -1);
	CHECK_EQ_INT(parse_with(6, "-1", &r), -1);
	CHECK_EQ_INT(parse_with(6, "1000", &r), -1);
	CHECK_EQ_INT(parse_with(6, "999", &r), 0);
	CHECK_EQ_INT(parse_with(8, "-1", &r), -1);
	CHECK_EQ_INT(parse_with(9, "-5", &r), -1);
	CHECK_EQ_INT(parse_with(12, "-1", &r), 0);
	CHECK_EQ_INT(r.tc, -1);
	CHECK_EQ_INT(parse_with(12, "-2", &r), -1);
	CHECK_EQ_INT(parse_with(14, "-1", &r), 0);
	CHECK_EQ_INT(r.ta, -1);
	/* status: -1 (none) to 999; it is stored as an int */
	CHECK_EQ_INT(parse_with(7, "-2", &r), -1);
	CHECK_EQ_INT(parse_with(7, "1000", &r), -1);
	CHECK_EQ_INT(parse_with(7, "4294967496", &r), -1);
	CHECK_EQ_INT(parse_with(7, "0", &r), 0);
	/* key id, stream, skipped, error */
	CHECK_EQ_INT(parse_with(18, "-1", &r), -1);
	CHECK_EQ_INT(parse_with(18, "x", &r), -1);
	CHECK_EQ_INT(parse_with(21, "2", &r), -1);
	CHECK_EQ_INT(parse_with(21, "-1", &r), -1);
	CHECK_EQ_INT(parse_with(21, "1", &r), 0);
	CHECK_EQ_INT(r.stream, 1);
	CHECK_EQ_INT(parse_with(22, "true", &r), -1);
	CHECK_EQ_INT(parse_with(22, "0", &r), 0);
	CHECK_EQ_INT(r.skipped, 0);
	CHECK_EQ_INT(parse_with(23, "-3", &r), 0);
	CHECK_EQ_INT(r.spoe_error, -3);
	CHECK_EQ_INT(parse_with(23, "e", &r), -1);
}

static void test_usage_fields(void)
{
	struct record r;

	/* json_query prints whatever integer the upstream wrote: a negative count is no
	 * count, and the record (status, bytes, timers) is kept. */
	CHECK_EQ_INT(parse_with(25, "-5", &r), 0);
	CHECK_EQ_INT(r.u[RECORD_U_PROMPT], ACCT_NONE);
	CHECK_EQ_INT(r.u[RECORD_U_COMPLETION], 500);
	CHECK_EQ_INT(parse_with(32, "-1", &r), 0);
	CHECK_EQ_INT(r.u[RECORD_U_CACHE_CREATION], ACCT_NONE);
	CHECK_EQ_INT(parse_with(30, "0", &r), 0);
	CHECK_EQ_INT(r.u[RECORD_U_OUTPUT], 0);
	CHECK_EQ_INT(parse_with(26, "9007199254740991", &r), 0);
	CHECK_EQ_INT(r.u[RECORD_U_COMPLETION], 9007199254740991LL);
	/* not an integer: not HAProxy's output */
	CHECK_EQ_INT(parse_with(25, "1.5", &r), -1);
	CHECK_EQ_INT(parse_with(25, "12abc", &r), -1);
	CHECK_EQ_INT(parse_with(25, "9223372036854775808", &r), -1);
}

static void test_capture_field(void)
{
	struct record r;

	CHECK_EQ_INT(parse_with(33, "c2 j 12 {\"a\":{\"usage\":1},\"ws\":0}", &r), 0);
	CHECK(r.has_capture && r.cap_kind == 'j');
	CHECK_EQ_INT(r.body_bytes, 12);
	CHECK(str_is(r.summary, "{\"a\":{\"usage\":1},\"ws\":0}"));
	/* spaces inside the summary: it runs to the end */
	CHECK_EQ_INT(parse_with(33, "c2 s 9000 {\"n\": 1, \"ev\": []}", &r), 0);
	CHECK(str_is(r.summary, "{\"n\": 1, \"ev\": []}"));
	CHECK_EQ_INT(parse_with(33, "c2 o 0 {}", &r), 0);
	CHECK(r.has_capture && r.cap_kind == 'o' && str_is(r.summary, "{}"));
	/* what it says is usage.c's to judge */
	CHECK_EQ_INT(parse_with(33, "c2 j 1 {", &r), 0);
	CHECK(str_is(r.summary, "{"));
}

static void test_capture_broken_keeps_record(void)
{
	struct record r;
	static const char *const broken[] = {
		/* the windows of the format before: never read again */
		"c1 j 12 5 4 {\"a\":1}\"b", "c1 j 3 3 0 abc",
		"c2 x 3 abc", "c2 jj 3 abc", "c2  3 abc", "c2 j -3 abc", "c2 j 3", "c2 j",
		"c2 j 3x abc", "c2 j 9007199254740992 abc", "c3 j 3 abc", "junk",
	};
	char buf[LINE_MAX_LEN];
	size_t i, n;

	for (i = 0; i < sizeof(broken) / sizeof(broken[0]); i++) {
		CHECK_EQ_INT(parse_with(33, broken[i], &r), 0);
		if (r.has_capture)
			fprintf(stderr, "capture accepted: %s\n", broken[i]);
		CHECK_EQ_INT(r.has_capture, 0);
		CHECK_EQ_INT(r.status, 200);
		CHECK_EQ_INT(r.u[RECORD_U_PROMPT], 1000);
	}
	/* a NUL kind byte is not a kind */
	n = line_with(buf, 33, "c2 ? 3 abc");
	*(char *)memchr(buf, '?', n) = '\0';
	CHECK_EQ_INT(record_parse(buf, n, &r), 0);
	CHECK_EQ_INT(r.has_capture, 0);
}

static void test_record_garbage(void)
{
	struct record r;
	char buf[LINE_MAX_LEN];
	size_t n;

	CHECK_EQ_INT(record_parse("", 0, &r), -1);
	CHECK_EQ_INT(parse_str("\n", &r), -1);
	CHECK_EQ_INT(parse_str("tally1", &r), -1);
	CHECK_EQ_INT(parse_str("GET / HTTP/1.1", &r), -1);
	CHECK_EQ_INT(parse_with(0, "tally1", &r), -1);   /* an older log-format */
	CHECK_EQ_INT(parse_with(0, "<134>tally1", &r), -1);
	/* too few fields */
	n = line_with(buf, -1, NULL);
	CHECK_EQ_INT(record_parse(buf, n, &r), 0);
	*(char *)memrchr(buf, ' ', n) = '\0';
	CHECK_EQ_INT(record_parse(buf, strlen(buf), &r), -1);
	/* a field doubled up (empty field) */
	CHECK_EQ_INT(parse_with(16, "a  b", &r), -1);
	/* termination, backend, verdict, id */
	CHECK_EQ_INT(parse_with(15, "-", &r), -1);
	CHECK_EQ_INT(parse_with(15, "CDX", &r), -1);
	CHECK_EQ_INT(parse_with(16, "", &r), -1);
	CHECK_EQ_INT(parse_with(17, "a\x01", &r), -1);
	CHECK_EQ_INT(parse_with(17, "0123456789012345678901234567890123456789012345678", &r), -1);
	CHECK_EQ_INT(parse_with(4, "0123456789012345678901234567890123456789012345678901234567890123",
	                        &r), -1);
	CHECK_EQ_INT(parse_with(4, "id\x7f", &r), -1);
	/* a NUL anywhere in a token */
	n = line_with(buf, 16, "be?x");
	*(char *)memchr(buf, '?', n) = '\0';
	CHECK_EQ_INT(record_parse(buf, n, &r), -1);
}

/* tally3, the log-format of today, with field 33 the id json_query read (url_enc) of
 * the response a Responses create stored, then the capture. */
static int parse3(const char *u_id, const char *cap, struct record *r)
{
	static char buf[LINE_MAX_LEN];
	size_t n = line_with(buf, 33, u_id);

	memcpy(buf, "tally3", 6);
	n += (size_t)snprintf(buf + n, LINE_MAX_LEN - n, " %s", cap);
	return record_parse(buf, n, r);
}

static void test_stored_response_id(void)
{
	struct record r;

	CHECK_EQ_INT(parse3("resp_67ccd2bed1ec8190", "-", &r), 0);
	CHECK(str_is(r.u_id, "resp_67ccd2bed1ec8190"));
	CHECK_EQ_INT(r.status, 200);
	CHECK_EQ_INT(r.has_capture, 0);
	CHECK_EQ_INT(parse3("-", "c2 j 12 {\"a\":{\"id\":\"r_1\"}}", &r), 0);
	CHECK_EQ_INT(r.u_id.len, 0);
	CHECK(r.has_capture && str_is(r.summary, "{\"a\":{\"id\":\"r_1\"}}"));
	/* an id that is no plain token is not reported, and costs the record nothing */
	CHECK_EQ_INT(parse3("resp\x01x", "-", &r), 0);
	CHECK_EQ_INT(r.u_id.len, 0);
	CHECK_EQ_INT(r.status, 200);
	/* tally2, the format before it, has no such field: its capture is still read */
	CHECK_EQ_INT(parse_with(33, "c2 j 2 {}", &r), 0);
	CHECK(r.has_capture && r.u_id.len == 0);
}

/* tally4: after the id, the classes priced apart and the tier (tally.cfg). */
static int parse4(const char *classes, const char *cap, struct record *r)
{
	static char buf[LINE_MAX_LEN];
	size_t n = line_with(buf, 33, "-");

	memcpy(buf, "tally4", 6);
	n += (size_t)snprintf(buf + n, LINE_MAX_LEN - n, " %s %s", classes, cap);
	return record_parse(buf, n, r);
}

static void test_priced_classes(void)
{
	struct record r;

	CHECK_EQ_INT(parse4("100 30 40 5 6 2 priority", "-", &r), 0);
	CHECK_EQ_INT(r.u[RECORD_U_CACHE_1H], 100);
	CHECK_EQ_INT(r.u[RECORD_U_AUDIO_INPUT], 30);
	CHECK_EQ_INT(r.u[RECORD_U_AUDIO_OUTPUT], 40);
	CHECK_EQ_INT(r.u[RECORD_U_PREDICTION_ACCEPTED], 5);
	CHECK_EQ_INT(r.u[RECORD_U_PREDICTION_REJECTED], 6);
	CHECK_EQ_INT(r.u[RECORD_U_WEB_SEARCH], 2);
	CHECK(str_is(r.u_tier, "priority"));
	CHECK_EQ_INT(r.u[RECORD_U_PROMPT], 1000);
	CHECK_EQ_INT(r.has_capture, 0);
	/* Absent, negative, and a tier no provider names (url_enc leaves %xx). */
	CHECK_EQ_INT(parse4("- -3 - - - - fl%20ex", "c2 j 2 {}", &r), 0);
	CHECK(r.u[RECORD_U_CACHE_1H] == ACCT_NONE && r.u[RECORD_U_AUDIO_INPUT] == ACCT_NONE);
	CHECK_EQ_INT(r.u_tier.len, 0);
	CHECK(r.has_capture);
	CHECK_EQ_INT(parse4("- - - - - - Priority", "-", &r), 0);
	CHECK_EQ_INT(r.u_tier.len, 0);
	/* A count that is not a number breaks the record, as any other would. */
	CHECK_EQ_INT(parse4("x - - - - - -", "-", &r), -1);
	/* tally3 and tally2 have none of them. */
	CHECK_EQ_INT(parse3("-", "-", &r), 0);
	CHECK(r.u[RECORD_U_WEB_SEARCH] == ACCT_NONE && r.u_tier.len == 0);
	CHECK_EQ_INT(parse_with(-1, NULL, &r), 0);
	CHECK(r.u[RECORD_U_CACHE_1H] == ACCT_NONE && r.u[RECORD_U_PROMPT] == 1000);
}

/* The connection's nonce stands in for a unique id HAProxy never made. */
static void test_missing_id_and_nonce(void)
{
	struct record r;
	char name[ACCT_ID_MAX];

	CHECK_EQ_INT(parse_with(0, "tally2", &r), 0);
	CHECK(str_is(r.mac, REC_MAC) && str_is(r.nonce, REC_NONCE) && str_is(r.tmac, REC_NMAC));
	record_name(&r, name, sizeof(name));
	CHECK_EQ_STR(name, "0b6f2d0e-1c7e-4a55-9d2c-2f4f1a9d0c11");
	CHECK_EQ_INT(parse_str("tally2 - " REC_NONCE " " REC_NMAC " - 1796278643 040 400 0 0 -1"
	                       " -1 -1 -1 0 CR gateway - - - - - - - - - - - - - - - - -", &r), 0);
	CHECK_EQ_INT(r.id.len, 0);
	CHECK_EQ_INT(r.status, 400);
	record_name(&r, name, sizeof(name));
	CHECK_EQ_STR(name, "haproxy-" REC_NONCE);
	/* Without either, nothing can name the transaction. */
	CHECK_EQ_INT(parse_str("tally2 - - - - 1796278643 040 400 0 0 -1 -1 -1 -1 0 CR gateway"
	                       " - - - - - - - - - - - - - - - - -", &r), -1);
	/* The header is the format's version: another one is refused whole. */
	CHECK_EQ_INT(parse_with(0, "tally2/12.3", &r), -1);
	CHECK_EQ_INT(parse_with(0, "tally3", &r), -1);
	CHECK_EQ_INT(parse_with(0, "tally6", &r), -1);
	CHECK_EQ_INT(parse_with(1, "mac mac", &r), -1);
	CHECK_EQ_INT(parse_with(1, "cmVjLW1hYy1yZWMtbWFjLXJlYy1tYWMtcmVjLW1hYyE=x", &r), -1);
	CHECK_EQ_INT(parse_with(2, "0123456789012345678901234567890123456789012345678901234567890123x",
	                        &r), -1);
	CHECK_EQ_INT(parse_with(3, "a\x01", &r), -1);
	CHECK_EQ_INT(parse_with(1, "-", &r), 0);
	CHECK_EQ_INT(r.mac.len, 0);
}

/* A tally5 record as HAProxy holds its variables (NULL: absent), printed per the
 * log-format (url_enc where it applies, "-" for absent) with the MACs tally.cfg's
 * concat() chains make, computed here apart from record.c. */
#define V5_FIELDS 42
struct v5 {
	const char *v[V5_FIELDS];
	int term_mac;                  /* HAProxy 3.4+: the termination state's own MAC */
	const char *st;                /* %ST as printed when v[7], the status variable,
	                                * is absent (no http-after-response) */
};

static const struct v5 v5_base = { {
	"tally5", NULL, REC_NONCE, NULL, "1796278643040-0001-00ab-9f3e", "1796278643", "040",
	"200", "342", "555", "3", "0", "0", "2", "5", "--", "be_mock_openai", "allow", "7",
	"meta/llama 3", "openai", "0", NULL, NULL, "gpt-4o-2024-08-06", "1000", "500", "200",
	"50", NULL, NULL, NULL, NULL, "resp_1", NULL, NULL, NULL, NULL, NULL, NULL, "priority",
	"c1 j 2 2 0 {}",
}, 1, NULL };

static int v5_url_encoded(int i)
{
	return i == 19 || i == 20 || i == 24 || i == 33 || i == 40;
}

static void v5_mac(const struct gwsecret *gw, const char *msg, size_t len, char *out)
{
	unsigned char mac[32];
	unsigned int maclen = sizeof(mac);

	HMAC(EVP_sha256(), gw->key, (int)gw->key_len, (const unsigned char *)msg, len, mac,
	     &maclen);
	EVP_EncodeBlock((unsigned char *)out, mac, (int)sizeof(mac));
}

/* The line of rec (printed into line) under gw: its views borrow line. */
static int v5_parse(const struct v5 *rec, const struct gwsecret *gw, char *line,
                    struct record *r)
{
	static const int covered[] = { 2, 4, 7, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28,
	                               29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41 };
	char msg[LINE_MAX_LEN], mac[GWSECRET_MAC_LEN + 1], tmac[GWSECRET_MAC_LEN + 1];
	size_t m, n = 0, i;

	m = (size_t)snprintf(msg, sizeof(msg), "tally5%s", rec->term_mac ? "t" : "");
	for (i = 0; i < sizeof(covered) / sizeof(covered[0]); i++) {
		const char *v = rec->v[covered[i]];

		m += (size_t)snprintf(msg + m, sizeof(msg) - m, "\x01%s", v ? v : "");
	}
	v5_mac(gw, msg, m, mac);
	m = (size_t)snprintf(msg, sizeof(msg), "%s\x01%s\x01%s", rec->v[15],
	                     rec->v[4] ? rec->v[4] : "", rec->v[2] ? rec->v[2] : "");
	v5_mac(gw, msg, m, tmac);
	for (i = 0; i < V5_FIELDS; i++) {
		const char *v = i == 1 ? mac : i == 3 ? (rec->term_mac ? tmac : NULL) :
		                i == 7 && !rec->v[7] ? rec->st : rec->v[i];
		const char *c;

		if (i)
			line[n++] = ' ';
		if (!v || !*v) {
			line[n++] = '-';
			continue;
		}
		for (c = v; *c; c++) {
			if (v5_url_encoded((int)i) && !strchr("-._~", *c) &&
			    !((*c | 0x20) >= 'a' && (*c | 0x20) <= 'z') && !(*c >= '0' && *c <= '9'))
				n += (size_t)snprintf(line + n, 4, "%%%02X", (unsigned char)*c);
			else
				line[n++] = *c;
		}
	}
	line[n] = '\0';
	return record_parse(line, n, r);
}

/* 1 if rec, as HAProxy would print it, parses and is authentic under gw. */
static int v5_authentic(const struct v5 *rec, const struct gwsecret *gw, struct gwsecret_mac *m)
{
	static char line[LINE_MAX_LEN];
	struct record r;

	return v5_parse(rec, gw, line, &r) == 0 && record_authentic(&r, m);
}

/* The copy a forger makes of an authentic line: field `which` replaced by value. */
static int v5_forged(const struct v5 *rec, const struct gwsecret *gw, struct gwsecret_mac *m,
                     int which, const char *value)
{
	static char line[LINE_MAX_LEN], out[LINE_MAX_LEN];
	struct record r;
	const char *p = line;
	size_t n = 0;
	int i;

	if (v5_parse(rec, gw, line, &r) < 0 || !record_authentic(&r, m))
		return -1;
	for (i = 0; i < V5_FIELDS; i++) {
		const char *sp = i < V5_FIELDS - 1 ? strchr(p, ' ') : p + strlen(p);

		n += (size_t)snprintf(out + n, sizeof(out) - n, "%s%.*s", i ? " " : "",
		                      i == which ? (int)strlen(value) : (int)(sp - p),
		                      i == which ? value : p);
		p = sp + 1;
	}
	return record_parse(out, n, &r) == 0 && record_authentic(&r, m);
}

/* Only the MAC under the gateway secret of every field the agent uses vouches for a
 * record: a copy with any of them changed is refused, and so is every record of the
 * formats before tally5, whose MAC was of the id alone. */
static void test_authentic(void)
{
	static const int changed[] = { 2, 4, 7, 15, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 30,
	                               33, 34, 40, 41 };
	static const char *const to[] = { "abc", "1796278643040-0001-00ab-9f3f", "500", "CD",
	                                  "deny", "8", "cheap", "other", "1", "1", "3", "cheap",
	                                  "1", "1", "1", "resp_2", "1", "default",
	                                  "c1 j 2 2 0 {}x" };
	struct gwsecret gw, other;
	struct gwsecret_mac *mgw, *mother;
	unsigned char key[KEYHASH_SECRET_LEN] = { 1, 2, 3 };
	char mac[GWSECRET_MAC_LEN + 1];
	struct v5 rec = v5_base;
	struct record r;
	size_t i;

	gwsecret_derive(key, &gw);
	key[0] = 9;
	gwsecret_derive(key, &other);
	mgw = gwsecret_mac_new(&gw);
	mother = gwsecret_mac_new(&other);
	CHECK(mgw && mother);
	if (!mgw || !mother)
		return;
	CHECK(v5_authentic(&rec, &gw, mgw));
	CHECK(!v5_authentic(&rec, &gw, mother));
	for (i = 0; i < sizeof(changed) / sizeof(changed[0]); i++) {
		CHECK_EQ_INT(v5_forged(&rec, &gw, mgw, changed[i], to[i]), 0);
		if (v5_forged(&rec, &gw, mgw, changed[i], to[i]))
			fprintf(stderr, "  field %d changed to %s passed\n", changed[i], to[i]);
	}
	/* The same values printed otherwise are the same record. */
	CHECK_EQ_INT(v5_forged(&rec, &gw, mgw, 20, "%6fpenai"), 1);
	/* Not covered: the timers, byte counts and backend (docs/haproxy-integration.md). */
	CHECK_EQ_INT(v5_forged(&rec, &gw, mgw, 14, "9"), 1);
	CHECK_EQ_INT(v5_forged(&rec, &gw, mgw, 8, "9"), 1);
	/* The termination-state MAC, once the main one says it comes, cannot be taken off. */
	CHECK_EQ_INT(v5_forged(&rec, &gw, mgw, 3, "-"), 0);
	CHECK_EQ_INT(v5_forged(&rec, &gw, mgw, 3, REC_MAC), 0);
	/* An id that does not start with the record's accept time (%Ts%ms-). */
	CHECK_EQ_INT(v5_forged(&rec, &gw, mgw, 6, "041"), 0);
	rec.v[4] = "0b6f2d0e-1c7e";
	CHECK(!v5_authentic(&rec, &gw, mgw));
	rec.v[4] = v5_base.v[4];
	/* HAProxy before 3.4: no termination MAC, and the main one says so; a tmac then
	 * added is refused. */
	rec.term_mac = 0;
	CHECK(v5_authentic(&rec, &gw, mgw));
	CHECK_EQ_INT(v5_forged(&rec, &gw, mgw, 15, "CD"), 1);
	CHECK_EQ_INT(v5_forged(&rec, &gw, mgw, 3, REC_MAC), 0);
	CHECK_EQ_INT(v5_forged(&rec, &gw, mgw, 25, "1"), 0);
	rec.term_mac = 1;
	/* A record without id, named by its nonce, of a request HAProxy could not parse:
	 * answered before http-after-response, it has no status variable. Its printed
	 * status is then unauthenticated, and taken only when not 2xx. */
	rec.v[4] = NULL;
	rec.v[7] = NULL;
	rec.st = "400";
	CHECK(v5_authentic(&rec, &gw, mgw));
	CHECK_EQ_INT(v5_forged(&rec, &gw, mgw, 2, "abc"), 0);
	CHECK_EQ_INT(v5_forged(&rec, &gw, mgw, 7, "408"), 1);
	CHECK_EQ_INT(v5_forged(&rec, &gw, mgw, 7, "200"), 0);
	rec.st = "200";
	CHECK(!v5_authentic(&rec, &gw, mgw));
	/* On 3.4 its termination state has no fetch either: the main MAC says one comes,
	 * none does. A record with an id is refused so. */
	rec.st = "400";
	CHECK_EQ_INT(v5_forged(&rec, &gw, mgw, 3, "-"), 1);
	rec.v[4] = v5_base.v[4];
	CHECK_EQ_INT(v5_forged(&rec, &gw, mgw, 3, "-"), 0);
	rec.v[7] = v5_base.v[7];
	/* A decoded value holding the separator would let the fields split otherwise. */
	rec.v[24] = "gpt\x01" "4";
	CHECK(!v5_authentic(&rec, &gw, mgw));
	rec.v[24] = v5_base.v[24];
	/* The formats before tally5: their MAC of the id alone is no longer enough. */
	{
		static char line[LINE_MAX_LEN];
		const char *id = "0b6f2d0e-1c7e-4a55-9d2c-2f4f1a9d0c11";

		v5_mac(&gw, id, strlen(id), mac);
		CHECK_EQ_INT(parse4("- - - - - - -", "-", &r), 0);
		CHECK(!record_authentic(&r, mgw));
		CHECK_EQ_INT(parse_with(1, mac, &r), 0);
		CHECK(!record_authentic(&r, mgw));
		CHECK_EQ_INT(v5_parse(&rec, &gw, line, &r), 0);
		line[5] = '4';
		CHECK_EQ_INT(parse_str(line, &r), 0);
		CHECK(!record_authentic(&r, mgw));
	}
	gwsecret_mac_free(mgw);
	gwsecret_mac_free(mother);
}

int main(void)
{
	RUN(test_frame_newline);
	RUN(test_frame_newline_limits);
	RUN(test_frame_octet_counted);
	RUN(test_frame_octet_garbage);
	RUN(test_real_unary);
	RUN(test_real_streams);
	RUN(test_gateway_answers);
	RUN(test_url_encoded_names);
	RUN(test_upstream_model_is_lenient);
	RUN(test_numbers);
	RUN(test_usage_fields);
	RUN(test_capture_field);
	RUN(test_capture_broken_keeps_record);
	RUN(test_record_garbage);
	RUN(test_missing_id_and_nonce);
	RUN(test_stored_response_id);
	RUN(test_priced_classes);
	RUN(test_authentic);
	return UNIT_DONE();
}
