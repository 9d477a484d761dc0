/* Unit tests of the SPOP codec (spoa/spop.c). Expected bytes are written out by hand
 * from doc/SPOE.txt, or taken from HAProxy itself (its health-check HELLO and the
 * AGENT-HELLO of its spop-check regression test), never produced by the encoder under
 * test. Single-threaded. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "spop.h"
#include "spop_eq.h"
#include "unit.h"

#define MFS 16380 /* HAProxy's default max-frame-size (tune.bufsize - 4) */

/* Hex string (spaces allowed) to bytes; returns the byte count. */
static size_t unhex(const char *hex, unsigned char *out, size_t cap)
{
	size_t n = 0;
	int hi = -1;

	for (; *hex; hex++) {
		int v;

		if (*hex == ' ')
			continue;
		if (*hex >= '0' && *hex <= '9')
			v = *hex - '0';
		else if (*hex >= 'a' && *hex <= 'f')
			v = *hex - 'a' + 10;
		else
			v = *hex - 'A' + 10;
		if (hi < 0) {
			hi = v;
		} else if (n < cap) {
			out[n++] = (unsigned char)(hi << 4 | v);
			hi = -1;
		}
	}
	return n;
}

static int str_is(struct spop_str s, const void *bytes, size_t len)
{
	return s.len == len && (len == 0 || memcmp(s.ptr, bytes, len) == 0);
}

/* ---- varints ---- */

static void test_varint_boundaries(void)
{
	static const struct { uint64_t v; int len; } cases[] = {
		{ 0, 1 }, { 239, 1 }, { 240, 2 }, { 2287, 2 }, { 2288, 3 },
		{ 264431, 3 }, { 264432, 4 }, { 33818863, 4 }, { 33818864, 5 },
		{ UINT32_MAX, 5 }, { 4328786159ULL, 5 }, { 4328786160ULL, 6 },
		{ (uint64_t)1 << 63, 10 }, { UINT64_MAX, 10 },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		unsigned char buf[SPOP_VARINT_MAX_LEN];
		const unsigned char *p = buf;
		uint64_t out = 0;
		int n = spop_varint_encode(cases[i].v, buf, sizeof(buf));
		int cut;

		CHECK_EQ_INT(n, cases[i].len);
		if (n != cases[i].len)
			continue;
		CHECK_EQ_INT(spop_varint_decode(&p, buf + n, &out), 0);
		CHECK(out == cases[i].v);
		CHECK(p == buf + n);
		/* every strict prefix is truncated and leaves the cursor alone */
		for (cut = 0; cut < n; cut++) {
			p = buf;
			CHECK_EQ_INT(spop_varint_decode(&p, buf + cut, &out), -1);
			CHECK(p == buf);
		}
	}
}

static void test_varint_known_bytes(void)
{
	unsigned char buf[SPOP_VARINT_MAX_LEN], want[SPOP_VARINT_MAX_LEN];
	size_t wn;

	CHECK_EQ_INT(spop_varint_encode(239, buf, sizeof(buf)), 1);
	CHECK_EQ_INT(buf[0], 0xef);
	CHECK_EQ_INT(spop_varint_encode(240, buf, sizeof(buf)), 2);
	CHECK(buf[0] == 0xf0 && buf[1] == 0x00);
	/* 16380 as HAProxy writes it in every HELLO */
	wn = unhex("fcf006", want, sizeof(want));
	CHECK_EQ_INT(spop_varint_encode(16380, buf, sizeof(buf)), (int)wn);
	CHECK(memcmp(buf, want, wn) == 0);
}

static void test_varint_rejects(void)
{
	unsigned char buf[16];
	const unsigned char *p;
	uint64_t out;
	size_t n;

	/* 11 bytes: too long even though every continuation byte is tiny */
	n = unhex("f0 80 80 80 80 80 80 80 80 80 00", buf, sizeof(buf));
	p = buf;
	CHECK_EQ_INT(spop_varint_decode(&p, buf + n, &out), -1);
	CHECK(p == buf);

	/* 10 bytes whose last one carries bits past 64 */
	n = unhex("ff f0 fe fe fe fe fe fe fe 1e", buf, sizeof(buf));
	p = buf;
	CHECK_EQ_INT(spop_varint_decode(&p, buf + n, &out), -1);

	/* UINT64_MAX + 1 by one more in the first byte's continuation chain */
	n = unhex("ff f1 fe fe fe fe fe fe fe 0e", buf, sizeof(buf));
	p = buf;
	CHECK_EQ_INT(spop_varint_decode(&p, buf + n, &out), -1);

	/* the exact UINT64_MAX encoding still decodes */
	n = unhex("ff f0 fe fe fe fe fe fe fe 0e", buf, sizeof(buf));
	p = buf;
	CHECK_EQ_INT(spop_varint_decode(&p, buf + n, &out), 0);
	CHECK(out == UINT64_MAX);

	/* empty input */
	p = buf;
	CHECK_EQ_INT(spop_varint_decode(&p, buf, &out), -1);
}

static void test_varint_encode_small_buffer(void)
{
	unsigned char buf[SPOP_VARINT_MAX_LEN + 1];

	memset(buf, 0xa5, sizeof(buf));
	CHECK_EQ_INT(spop_varint_encode(0, buf, 0), -1);
	CHECK_EQ_INT(spop_varint_encode(240, buf, 1), -1);
	CHECK_EQ_INT(spop_varint_encode(UINT64_MAX, buf, 9), -1);
	CHECK_EQ_INT(buf[0], 0xa5);
	CHECK_EQ_INT(spop_varint_encode(UINT64_MAX, buf, 10), 10);
	CHECK_EQ_INT(buf[10], 0xa5);
}

/* ---- frames ---- */

/* A NOTIFY, stream 300, frame 7, FIN; payload = two messages with one of every data
 * type (see test_notify_messages). The first message takes 70 payload bytes. */
static const char notify_hex[] =
	"000000a5 03 00000001 fc03 07"
	"07726571756573740700000174110166010369333202fbf0fefefefefefefe0e066933326d61"
	"7802fff0fefe3e0375333203fff0fefe7e0369363404f0f1fefefefefefefe06"
	"026d32080369703406c0a800010369703607000102030405060708090a0b0c0d0e0f02657308"
	"0003737472080568656c6c6f0362696e090300610002656209000375363405fff0fefefefefe"
	"fefe0e046936347004fc03";
#define NOTIFY_M1_LEN 70

/* HAProxy's health-check HELLO, byte for byte (82 bytes: its spop-check test waits
 * for exactly that many): versions "2.0", max-frame-size 16380, capabilities "",
 * healthcheck true. */
static const char hc_hello_hex[] =
	"0000004e 01 00000001 00 00"
	"12 737570706f727465642d76657273696f6e73 08 03 322e30"
	"0e 6d61782d6672616d652d73697a65 03 fcf006"
	"0c 6361706162696c6974696573 08 00"
	"0b 6865616c7468636865636b 11";

static void test_frame_need_more(void)
{
	unsigned char buf[256];
	size_t n = unhex(notify_hex, buf, sizeof(buf)), cut, consumed = 0;
	struct spop_frame f;
	enum spop_status err = SPOP_ERR_NONE;

	CHECK_EQ_INT(n, 169);
	for (cut = 0; cut < n; cut++) {
		consumed = 12345;
		CHECK_EQ_INT(spop_frame_decode(buf, cut, MFS, &f, &consumed, &err), 0);
		CHECK_EQ_INT(consumed, 12345);
	}
	CHECK_EQ_INT(spop_frame_decode(buf, n, MFS, &f, &consumed, &err), 1);
	CHECK_EQ_INT(consumed, n);
	CHECK_EQ_INT(f.type, SPOP_FRAME_NOTIFY);
	CHECK_EQ_INT(f.flags, SPOP_FLAG_FIN);
	CHECK(f.stream_id == 300 && f.frame_id == 7);
	CHECK(f.payload == buf + 12);
	CHECK_EQ_INT(f.payload_len, n - 12);
}

static void test_frame_too_big(void)
{
	unsigned char len_only[4] = { 0x00, 0x00, 0x40, 0x00 }; /* 16384 */
	unsigned char at_max[4] = { 0x00, 0x00, 0x3f, 0xfc };  /* 16380 */
	struct spop_frame f;
	size_t consumed;
	enum spop_status err = SPOP_ERR_NONE;

	/* decided from the 4 length bytes alone, without waiting for the body */
	CHECK_EQ_INT(spop_frame_decode(len_only, 4, MFS, &f, &consumed, &err), -1);
	CHECK_EQ_INT(err, SPOP_ERR_TOO_BIG);
	err = SPOP_ERR_NONE;
	len_only[0] = 0xff;
	CHECK_EQ_INT(spop_frame_decode(len_only, 4, MFS, &f, &consumed, &err), -1);
	CHECK_EQ_INT(err, SPOP_ERR_TOO_BIG);
	len_only[0] = 0x00;
	len_only[2] = 0x3f;
	len_only[3] = 0xfd; /* 16381 */
	err = SPOP_ERR_NONE;
	CHECK_EQ_INT(spop_frame_decode(len_only, 4, MFS, &f, &consumed, &err), -1);
	CHECK_EQ_INT(err, SPOP_ERR_TOO_BIG);
	/* exactly max-frame-size is allowed: wait for the body */
	err = SPOP_ERR_NONE;
	CHECK_EQ_INT(spop_frame_decode(at_max, 4, MFS, &f, &consumed, &err), 0);
	CHECK_EQ_INT(err, SPOP_ERR_NONE);
}

static void test_frame_too_short(void)
{
	unsigned char buf[16];
	struct spop_frame f;
	size_t consumed, n;
	enum spop_status err;

	/* 6 < type + flags + two ids */
	n = unhex("00000006 03 00000001 00", buf, sizeof(buf));
	err = SPOP_ERR_NONE;
	CHECK_EQ_INT(spop_frame_decode(buf, 4, MFS, &f, &consumed, &err), -1);
	CHECK_EQ_INT(err, SPOP_ERR_INVALID);
	err = SPOP_ERR_NONE;
	CHECK_EQ_INT(spop_frame_decode(buf, n, MFS, &f, &consumed, &err), -1);
	CHECK_EQ_INT(err, SPOP_ERR_INVALID);

	n = unhex("00000000", buf, sizeof(buf));
	err = SPOP_ERR_NONE;
	CHECK_EQ_INT(spop_frame_decode(buf, n, MFS, &f, &consumed, &err), -1);
	CHECK_EQ_INT(err, SPOP_ERR_INVALID);

	/* long enough, but the frame-id varint runs past the frame's end */
	n = unhex("00000007 03 00000001 00 f0 00", buf, sizeof(buf));
	err = SPOP_ERR_NONE;
	CHECK_EQ_INT(spop_frame_decode(buf, n, MFS, &f, &consumed, &err), -1);
	CHECK_EQ_INT(err, SPOP_ERR_INVALID);

	/* the smallest valid frame: no payload */
	n = unhex("00000007 66 00000001 00 00", buf, sizeof(buf));
	CHECK_EQ_INT(spop_frame_decode(buf, n, MFS, &f, &consumed, &err), 1);
	CHECK_EQ_INT(consumed, 11);
	CHECK_EQ_INT(f.payload_len, 0);
}

static void test_frame_back_to_back(void)
{
	unsigned char buf[512];
	size_t n1 = unhex(notify_hex, buf, sizeof(buf));
	size_t n2 = unhex(hc_hello_hex, buf + n1, sizeof(buf) - n1);
	size_t consumed = 0, off;
	struct spop_frame f;
	enum spop_status err;

	CHECK_EQ_INT(spop_frame_decode(buf, n1 + n2, MFS, &f, &consumed, &err), 1);
	CHECK_EQ_INT(consumed, n1);
	CHECK_EQ_INT(f.type, SPOP_FRAME_NOTIFY);
	off = consumed;
	CHECK_EQ_INT(spop_frame_decode(buf + off, n1 + n2 - off, MFS, &f, &consumed, &err), 1);
	CHECK_EQ_INT(consumed, n2);
	CHECK_EQ_INT(f.type, SPOP_FRAME_HAPROXY_HELLO);
	CHECK(f.payload + f.payload_len == buf + n1 + n2);
	off += consumed;
	CHECK_EQ_INT(spop_frame_decode(buf + off, 0, MFS, &f, &consumed, &err), 0);
}

static void test_frame_big_ids(void)
{
	unsigned char buf[64];
	struct spop_writer w;
	struct spop_frame f;
	size_t consumed;
	enum spop_status err;
	int n;

	spop_writer_init(&w, buf, sizeof(buf));
	spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FLAG_FIN, ((uint64_t)1 << 32) + 5, UINT64_MAX);
	n = spop_frame_end(&w);
	CHECK_EQ_INT(n, 4 + 5 + 5 + 10);
	CHECK_EQ_INT(spop_frame_decode(buf, (size_t)n, MFS, &f, &consumed, &err), 1);
	CHECK(f.stream_id == ((uint64_t)1 << 32) + 5);
	CHECK(f.frame_id == UINT64_MAX);
	CHECK_EQ_INT(f.type, SPOP_FRAME_ACK);
	CHECK_EQ_INT(f.payload_len, 0);
}

/* ---- HELLO ---- */

#define OMIT_VSN  0x1
#define OMIT_MFS  0x2
#define OMIT_CAP  0x4

/* Builds a HAPROXY-HELLO with the writer's KV helpers and decodes its header. */
static int hello_try(const char *versions, uint32_t mfs, const char *caps, int omit,
                     struct spop_hello *h, enum spop_status *err)
{
	static unsigned char buf[512];
	struct spop_writer w;
	struct spop_frame f;
	size_t consumed;
	int n;

	spop_writer_init(&w, buf, sizeof(buf));
	spop_frame_begin(&w, SPOP_FRAME_HAPROXY_HELLO, SPOP_FLAG_FIN, 0, 0);
	if (!(omit & OMIT_VSN))
		spop_put_kv_str(&w, "supported-versions", versions, strlen(versions));
	if (!(omit & OMIT_MFS))
		spop_put_kv_uint32(&w, "max-frame-size", mfs);
	if (!(omit & OMIT_CAP))
		spop_put_kv_str(&w, "capabilities", caps, strlen(caps));
	spop_put_kv_str(&w, "engine-id", "abc-123", 7);
	spop_put_kv_str(&w, "some-future-key", "x", 1);
	n = spop_frame_end(&w);
	if (n < 0 || spop_frame_decode(buf, (size_t)n, MFS, &f, &consumed, err) != 1)
		return -2;
	*err = SPOP_ERR_NONE;
	return spop_hello_parse(&f, h, err);
}

static void test_hello_normal(void)
{
	struct spop_hello h;
	enum spop_status err;

	CHECK_EQ_INT(hello_try("2.0", MFS, "pipelining,async", 0, &h, &err), 0);
	CHECK_EQ_INT(h.max_frame_size, MFS);
	CHECK_EQ_INT(h.healthcheck, 0);
	CHECK_EQ_INT(h.pipelining, 1);
	CHECK_EQ_INT(h.fragmentation, 0);
	CHECK(str_is(h.engine_id, "abc-123", 7));

	CHECK_EQ_INT(hello_try("2.0", MFS, " fragmentation , pipelining ", 0, &h, &err), 0);
	CHECK_EQ_INT(h.pipelining, 1);
	CHECK_EQ_INT(h.fragmentation, 1);

	CHECK_EQ_INT(hello_try("2.0", MFS, "pipelining2,xpipelining,async", 0, &h, &err), 0);
	CHECK_EQ_INT(h.pipelining, 0);
	CHECK_EQ_INT(h.fragmentation, 0);
}

static void test_hello_healthcheck(void)
{
	unsigned char buf[128];
	size_t n = unhex(hc_hello_hex, buf, sizeof(buf)), consumed;
	struct spop_frame f;
	struct spop_hello h;
	enum spop_status err = SPOP_ERR_NONE;

	CHECK_EQ_INT(n, 82);
	CHECK_EQ_INT(spop_frame_decode(buf, n, MFS, &f, &consumed, &err), 1);
	CHECK_EQ_INT(spop_hello_parse(&f, &h, &err), 0);
	CHECK_EQ_INT(h.healthcheck, 1);
	CHECK_EQ_INT(h.max_frame_size, 16380);
	CHECK_EQ_INT(h.pipelining, 0);
	CHECK_EQ_INT(h.fragmentation, 0);
	CHECK_EQ_INT(h.engine_id.len, 0);

	/* the writer's KV helpers reproduce HAProxy's frame byte for byte */
	{
		unsigned char mine[128];
		struct spop_writer w;

		spop_writer_init(&w, mine, sizeof(mine));
		spop_frame_begin(&w, SPOP_FRAME_HAPROXY_HELLO, SPOP_FLAG_FIN, 0, 0);
		spop_put_kv_str(&w, "supported-versions", "2.0", 3);
		spop_put_kv_uint32(&w, "max-frame-size", 16380);
		spop_put_kv_str(&w, "capabilities", "", 0);
		spop_put_kv_bool(&w, "healthcheck", 1);
		CHECK_EQ_INT(spop_frame_end(&w), (int)n);
		CHECK(memcmp(mine, buf, n) == 0);
	}

	/* healthcheck false is the same as absent */
	buf[n - 1] = SPOP_DATA_BOOL;
	CHECK_EQ_INT(spop_frame_decode(buf, n, MFS, &f, &consumed, &err), 1);
	CHECK_EQ_INT(spop_hello_parse(&f, &h, &err), 0);
	CHECK_EQ_INT(h.healthcheck, 0);
}

static void test_hello_missing_keys(void)
{
	struct spop_hello h;
	enum spop_status err;

	CHECK_EQ_INT(hello_try("2.0", MFS, "", OMIT_VSN, &h, &err), -1);
	CHECK_EQ_INT(err, SPOP_ERR_NO_VSN);
	CHECK_EQ_INT(hello_try("2.0", MFS, "", OMIT_MFS, &h, &err), -1);
	CHECK_EQ_INT(err, SPOP_ERR_NO_FRAME_SIZE);
	CHECK_EQ_INT(hello_try("2.0", MFS, "", OMIT_CAP, &h, &err), -1);
	CHECK_EQ_INT(err, SPOP_ERR_NO_CAP);
	CHECK_EQ_INT(hello_try("2.0", MFS, "", OMIT_VSN | OMIT_MFS | OMIT_CAP, &h, &err), -1);
	CHECK_EQ_INT(err, SPOP_ERR_NO_VSN);
}

static void test_hello_versions(void)
{
	static const struct { const char *v; int ok; } cases[] = {
		{ "2.0", 1 }, { "1.0, 2.0", 1 }, { " 2.0 ", 1 }, { "2.0,1.5", 1 },
		{ "2.5", 1 }, { "bogus,2.0", 1 }, { "02.0", 1 },
		{ "1.0", 0 }, { "3.0", 0 }, { "20.0", 0 }, { "2.", 0 }, { ".0", 0 },
		{ "2.0x", 0 }, { "2", 0 }, { "", 0 }, { "2 .0", 0 }, { ",,", 0 },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct spop_hello h;
		enum spop_status err = SPOP_ERR_NONE;
		int r = hello_try(cases[i].v, MFS, "", 0, &h, &err);

		if (cases[i].ok) {
			CHECK_EQ_INT(r, 0);
		} else {
			CHECK_EQ_INT(r, -1);
			CHECK_EQ_INT(err, SPOP_ERR_BAD_VSN);
		}
		if ((r == 0) != cases[i].ok)
			fprintf(stderr, "  version list \"%s\"\n", cases[i].v);
	}
}

static void test_hello_frame_size(void)
{
	struct spop_hello h;
	enum spop_status err;

	CHECK_EQ_INT(hello_try("2.0", 255, "", 0, &h, &err), -1);
	CHECK_EQ_INT(err, SPOP_ERR_BAD_FRAME_SIZE);
	CHECK_EQ_INT(hello_try("2.0", 0, "", 0, &h, &err), -1);
	CHECK_EQ_INT(err, SPOP_ERR_BAD_FRAME_SIZE);
	CHECK_EQ_INT(hello_try("2.0", 256, "", 0, &h, &err), 0);
	CHECK_EQ_INT(h.max_frame_size, 256);
	CHECK_EQ_INT(hello_try("2.0", UINT32_MAX, "", 0, &h, &err), 0);
	CHECK(h.max_frame_size == UINT32_MAX);
}

/* Hand-written HELLO items, to send types the writer's helpers never produce. */
#define K_VSN  "12 737570706f727465642d76657273696f6e73"
#define K_MFS  "0e 6d61782d6672616d652d73697a65"
#define K_CAP  "0c 6361706162696c6974696573"
#define KV_VSN K_VSN " 08 03 322e30"
#define KV_MFS K_MFS " 03 fcf006"
#define KV_CAP K_CAP " 08 00"

/* Wraps a hand-written payload in a HAPROXY-HELLO header and parses it. */
static int hello_raw(const char *payload_hex, struct spop_hello *h, enum spop_status *err)
{
	unsigned char buf[256];
	size_t n = unhex("00000000 01 00000001 00 00", buf, sizeof(buf)), consumed;
	struct spop_frame f;

	n += unhex(payload_hex, buf + n, sizeof(buf) - n);
	buf[3] = (unsigned char)(n - 4);
	if (spop_frame_decode(buf, n, MFS, &f, &consumed, err) != 1)
		return -2;
	*err = SPOP_ERR_NONE;
	return spop_hello_parse(&f, h, err);
}

static void test_hello_value_types(void)
{
	static const struct {
		const char *payload;
		enum spop_status err;   /* SPOP_ERR_NONE: accepted */
		uint32_t mfs;
	} cases[] = {
		{ KV_VSN KV_MFS KV_CAP, SPOP_ERR_NONE, 16380 },
		{ KV_VSN K_MFS " 05 f031" KV_CAP, SPOP_ERR_NONE, 1024 },            /* UINT64 */
		{ KV_VSN K_MFS " 04 f031" KV_CAP, SPOP_ERR_NONE, 1024 },            /* INT64 */
		{ KV_VSN K_MFS " 05 f0f1fefefefe00" KV_CAP, SPOP_ERR_NONE, UINT32_MAX }, /* 2^40 */
		{ KV_VSN K_MFS " 02 fff0fefefefefefefe0e" KV_CAP, SPOP_ERR_INVALID, 0 }, /* -1 */
		{ KV_VSN K_MFS " 08 0431303234" KV_CAP, SPOP_ERR_INVALID, 0 },     /* "1024" */
		{ K_VSN " 09 03 322e30" KV_MFS KV_CAP, SPOP_ERR_INVALID, 0 },      /* binary */
		{ KV_VSN KV_MFS K_CAP " 00", SPOP_ERR_INVALID, 0 },                /* null */
		{ KV_VSN KV_MFS KV_CAP " 09 656e67696e652d6964 02 05", SPOP_ERR_INVALID, 0 },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct spop_hello h;
		enum spop_status err = SPOP_ERR_NONE;
		int r = hello_raw(cases[i].payload, &h, &err);

		if (cases[i].err == SPOP_ERR_NONE) {
			CHECK_EQ_INT(r, 0);
			CHECK(r != 0 || h.max_frame_size == cases[i].mfs);
		} else {
			CHECK_EQ_INT(r, -1);
			CHECK_EQ_INT(err, cases[i].err);
		}
		if (r != (cases[i].err == SPOP_ERR_NONE ? 0 : -1))
			fprintf(stderr, "  case %zu\n", i);
	}
}

static void test_hello_header_rules(void)
{
	unsigned char buf[128];
	size_t n = unhex(hc_hello_hex, buf, sizeof(buf)), consumed;
	struct spop_frame f;
	struct spop_hello h;
	enum spop_status err;

	CHECK_EQ_INT(spop_frame_decode(buf, n, MFS, &f, &consumed, &err), 1);

	f.flags = 0;
	CHECK_EQ_INT(spop_hello_parse(&f, &h, &err), -1);
	CHECK_EQ_INT(err, SPOP_ERR_FRAG_NOT_SUPPORTED);
	f.flags = SPOP_FLAG_FIN;

	f.stream_id = 1;
	CHECK_EQ_INT(spop_hello_parse(&f, &h, &err), -1);
	CHECK_EQ_INT(err, SPOP_ERR_INVALID);
	f.stream_id = 0;

	f.type = SPOP_FRAME_NOTIFY;
	CHECK_EQ_INT(spop_hello_parse(&f, &h, &err), -1);
	CHECK_EQ_INT(err, SPOP_ERR_INVALID);
	f.type = SPOP_FRAME_HAPROXY_HELLO;

	/* payload cut inside a KV pair */
	f.payload_len -= 3;
	CHECK_EQ_INT(spop_hello_parse(&f, &h, &err), -1);
	CHECK_EQ_INT(err, SPOP_ERR_INVALID);
	f.payload_len += 3;

	/* "healthcheck" given as a string instead of a boolean */
	buf[n - 1] = SPOP_DATA_STR;
	buf[n] = 0;
	f.payload_len++;
	CHECK_EQ_INT(spop_hello_parse(&f, &h, &err), -1);
	CHECK_EQ_INT(err, SPOP_ERR_INVALID);
}

/* ---- NOTIFY ---- */

static void test_notify_messages(void)
{
	static const unsigned char ip6[16] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 };
	unsigned char buf[256];
	size_t n = unhex(notify_hex, buf, sizeof(buf)), consumed;
	const unsigned char *p, *a, *end;
	struct spop_frame f;
	struct spop_msg m;
	struct spop_str k;
	struct spop_data d;
	enum spop_status err;

	CHECK_EQ_INT(spop_frame_decode(buf, n, MFS, &f, &consumed, &err), 1);
	p = f.payload;
	end = f.payload + f.payload_len;

	CHECK_EQ_INT(spop_msg_next(&p, end, &m), 1);
	CHECK(str_is(m.name, "request", 7));
	CHECK_EQ_INT(m.nargs, 7);
	CHECK(m.args_end == f.payload + NOTIFY_M1_LEN);
	a = m.args;
	CHECK_EQ_INT(spop_kv_next(&a, m.args_end, &k, &d), 1);
	CHECK(str_is(k, "", 0) && d.type == SPOP_DATA_NULL);
	CHECK_EQ_INT(spop_kv_next(&a, m.args_end, &k, &d), 1);
	CHECK(str_is(k, "t", 1) && d.type == SPOP_DATA_BOOL && d.u.b == 1);
	CHECK_EQ_INT(spop_kv_next(&a, m.args_end, &k, &d), 1);
	CHECK(str_is(k, "f", 1) && d.type == SPOP_DATA_BOOL && d.u.b == 0);
	CHECK_EQ_INT(spop_kv_next(&a, m.args_end, &k, &d), 1);
	CHECK(str_is(k, "i32", 3) && d.type == SPOP_DATA_INT32 && d.u.i32 == -5);
	CHECK_EQ_INT(spop_kv_next(&a, m.args_end, &k, &d), 1);
	CHECK(str_is(k, "i32max", 6) && d.type == SPOP_DATA_INT32 && d.u.i32 == INT32_MAX);
	CHECK_EQ_INT(spop_kv_next(&a, m.args_end, &k, &d), 1);
	CHECK(str_is(k, "u32", 3) && d.type == SPOP_DATA_UINT32 && d.u.u32 == UINT32_MAX);
	CHECK_EQ_INT(spop_kv_next(&a, m.args_end, &k, &d), 1);
	CHECK(str_is(k, "i64", 3) && d.type == SPOP_DATA_INT64 && d.u.i64 == INT64_MIN);
	CHECK_EQ_INT(spop_kv_next(&a, m.args_end, &k, &d), 0);

	CHECK_EQ_INT(spop_msg_next(&p, end, &m), 1);
	CHECK(str_is(m.name, "m2", 2));
	CHECK_EQ_INT(m.nargs, 8);
	CHECK(m.args_end == end);
	a = m.args;
	CHECK_EQ_INT(spop_kv_next(&a, m.args_end, &k, &d), 1);
	CHECK(str_is(k, "ip4", 3) && d.type == SPOP_DATA_IPV4 &&
	      memcmp(d.u.ip, "\xc0\xa8\x00\x01", 4) == 0);
	CHECK_EQ_INT(spop_kv_next(&a, m.args_end, &k, &d), 1);
	CHECK(str_is(k, "ip6", 3) && d.type == SPOP_DATA_IPV6 && memcmp(d.u.ip, ip6, 16) == 0);
	CHECK_EQ_INT(spop_kv_next(&a, m.args_end, &k, &d), 1);
	CHECK(str_is(k, "es", 2) && d.type == SPOP_DATA_STR && d.u.str.len == 0);
	CHECK_EQ_INT(spop_kv_next(&a, m.args_end, &k, &d), 1);
	CHECK(str_is(k, "str", 3) && d.type == SPOP_DATA_STR && str_is(d.u.str, "hello", 5));
	CHECK_EQ_INT(spop_kv_next(&a, m.args_end, &k, &d), 1);
	CHECK(str_is(k, "bin", 3) && d.type == SPOP_DATA_BIN && str_is(d.u.str, "\0a\0", 3));
	CHECK_EQ_INT(spop_kv_next(&a, m.args_end, &k, &d), 1);
	CHECK(str_is(k, "eb", 2) && d.type == SPOP_DATA_BIN && d.u.str.len == 0);
	CHECK_EQ_INT(spop_kv_next(&a, m.args_end, &k, &d), 1);
	CHECK(str_is(k, "u64", 3) && d.type == SPOP_DATA_UINT64 && d.u.u64 == UINT64_MAX);
	CHECK_EQ_INT(spop_kv_next(&a, m.args_end, &k, &d), 1);
	CHECK(str_is(k, "i64p", 4) && d.type == SPOP_DATA_INT64 && d.u.i64 == 300);
	CHECK_EQ_INT(spop_kv_next(&a, m.args_end, &k, &d), 0);

	CHECK_EQ_INT(spop_msg_next(&p, end, &m), 0);
}

/* Every cut of the NOTIFY payload either ends on a message boundary or is reported as
 * malformed; nothing is read past the cut (ASan/valgrind builds check that). */
static void test_notify_truncated(void)
{
	unsigned char buf[256];
	size_t n = unhex(notify_hex, buf, sizeof(buf)), consumed, cut;
	struct spop_frame f;
	enum spop_status err;

	CHECK_EQ_INT(spop_frame_decode(buf, n, MFS, &f, &consumed, &err), 1);
	for (cut = 0; cut <= f.payload_len; cut++) {
		const unsigned char *p = f.payload, *end = f.payload + cut;
		struct spop_msg m;
		int r, msgs = 0;

		while ((r = spop_msg_next(&p, end, &m)) == 1)
			msgs++;
		if (cut == 0) {
			CHECK(r == 0 && msgs == 0);
		} else if (cut == NOTIFY_M1_LEN) {
			CHECK(r == 0 && msgs == 1);
		} else if (cut == f.payload_len) {
			CHECK(r == 0 && msgs == 2);
		} else {
			CHECK_EQ_INT(r, -1);
			CHECK(p == f.payload + (cut > NOTIFY_M1_LEN ? NOTIFY_M1_LEN : 0));
		}
	}
}

static void test_msg_malformed(void)
{
	unsigned char buf[32];
	const unsigned char *p;
	struct spop_msg m;
	size_t n;

	/* claims 2 args, carries 1 */
	n = unhex("01 6d 02 01 61 11", buf, sizeof(buf));
	p = buf;
	CHECK_EQ_INT(spop_msg_next(&p, buf + n, &m), -1);
	CHECK(p == buf);
	/* name without NB-ARGS (the zero after it lies outside the input) */
	memset(buf, 0, sizeof(buf));
	n = unhex("01 6d", buf, sizeof(buf));
	p = buf;
	CHECK_EQ_INT(spop_msg_next(&p, buf + n, &m), -1);
	/* name length past the end */
	n = unhex("05 6d", buf, sizeof(buf));
	p = buf;
	CHECK_EQ_INT(spop_msg_next(&p, buf + n, &m), -1);
	/* a message with no args */
	n = unhex("01 6d 00", buf, sizeof(buf));
	p = buf;
	CHECK_EQ_INT(spop_msg_next(&p, buf + n, &m), 1);
	CHECK_EQ_INT(m.nargs, 0);
	CHECK(m.args == m.args_end && p == buf + n);
}

static void test_data_decode_errors(void)
{
	static const char *bad[] = {
		"0a",                           /* reserved type 10 */
		"0f",                           /* reserved type 15 */
		"06 0a0000",                    /* IPv4 cut short */
		"07 000000000000000000000000000000", /* IPv6 cut short */
		"08 05 6162",                   /* string longer than the buffer */
		"09 fffffffffffffffff0",        /* length varint never ends */
		"02 f0f1fefe3e",                /* INT32 value 2^31 */
		"02 fff0fefebefefefefe0e",      /* INT32 value -2^31 - 1 */
		"03 f0f1fefe7e",                /* UINT32 value 2^32 */
		"03",                           /* UINT32 without its varint */
		"",                             /* nothing at all */
	};
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		unsigned char buf[32];
		size_t n = unhex(bad[i], buf, sizeof(buf));
		const unsigned char *p = buf;
		struct spop_data d;
		int r = spop_data_decode(&p, buf + n, &d);

		CHECK_EQ_INT(r, -1);
		CHECK(p == buf);
		if (r != -1 || p != buf)
			fprintf(stderr, "  input \"%s\"\n", bad[i]);
	}
}

static void test_data_decode_int32_limits(void)
{
	unsigned char buf[16];
	const unsigned char *p;
	struct spop_data d;
	size_t n;

	/* -2^31, sign-extended to 64 bits as HAProxy writes negative values */
	n = unhex("02 f0f1fefebefefefefe0e", buf, sizeof(buf));
	p = buf;
	CHECK_EQ_INT(spop_data_decode(&p, buf + n, &d), 0);
	CHECK(d.type == SPOP_DATA_INT32 && d.u.i32 == INT32_MIN);
	CHECK(p == buf + n);
	/* flag bits on a non-boolean type are ignored, as HAProxy does */
	n = unhex("13 05", buf, sizeof(buf));
	p = buf;
	CHECK_EQ_INT(spop_data_decode(&p, buf + n, &d), 0);
	CHECK(d.type == SPOP_DATA_UINT32 && d.u.u32 == 5);
}

/* ---- ACK ---- */

/* Stream 2^32 + 1, frame 9, FIN: one set-var per data type, then an unset-var. */
static const char ack_hex[] =
	"00000092 67 00000001 f1f1fefe7e 09"
	"01 03 02 0162 11"
	"01 03 03 03693332 02 fff0fefefefefefefe0e"
	"01 03 01 03753332 03 fff0fefe7e"
	"01 03 00 03693634 04 f0f1fefefefefefefe06"
	"01 03 04 03753634 05 f000"
	"01 03 02 03697034 06 0a000001"
	"01 03 02 03697036 07 00000000000000000000000000000001"
	"01 03 02 0173 08 026f6b"
	"01 03 02 0362696e 09 020001"
	"01 03 02 016e 00"
	"02 02 02 04676f6e65";

struct ack_case {
	enum spop_scope scope;
	const char *name;
	struct spop_data v;
};

/* Reads one action with the public primitives; returns its type or -1. */
static int read_action(const unsigned char **p, const unsigned char *end, unsigned *nargs,
                       unsigned *scope, struct spop_str *name, struct spop_data *v)
{
	const unsigned char *q = *p;
	uint64_t len;
	int type;

	if (end - q < 3)
		return -1;
	type = q[0];
	*nargs = q[1];
	*scope = q[2];
	q += 3;
	if (spop_varint_decode(&q, end, &len) < 0 || len > (uint64_t)(end - q))
		return -1;
	name->ptr = (const char *)q;
	name->len = (size_t)len;
	q += len;
	if (type == SPOP_ACT_SET_VAR && spop_data_decode(&q, end, v) < 0)
		return -1;
	*p = q;
	return type;
}

static void test_ack_encode(void)
{
	struct ack_case cases[] = {
		{ SPOP_SCOPE_TXN, "b", { .type = SPOP_DATA_BOOL, .u.b = 1 } },
		{ SPOP_SCOPE_REQ, "i32", { .type = SPOP_DATA_INT32, .u.i32 = -1 } },
		{ SPOP_SCOPE_SESS, "u32", { .type = SPOP_DATA_UINT32, .u.u32 = UINT32_MAX } },
		{ SPOP_SCOPE_PROC, "i64", { .type = SPOP_DATA_INT64, .u.i64 = INT64_MIN } },
		{ SPOP_SCOPE_RES, "u64", { .type = SPOP_DATA_UINT64, .u.u64 = 240 } },
		{ SPOP_SCOPE_TXN, "ip4", { .type = SPOP_DATA_IPV4, .u.ip = { 10, 0, 0, 1 } } },
		{ SPOP_SCOPE_TXN, "ip6", { .type = SPOP_DATA_IPV6, .u.ip = { [15] = 1 } } },
		{ SPOP_SCOPE_TXN, "s", { .type = SPOP_DATA_STR, .u.str = { "ok", 2 } } },
		{ SPOP_SCOPE_TXN, "bin", { .type = SPOP_DATA_BIN, .u.str = { "\0\1", 2 } } },
		{ SPOP_SCOPE_TXN, "n", { .type = SPOP_DATA_NULL } },
	};
	const size_t ncases = sizeof(cases) / sizeof(cases[0]);
	unsigned char buf[256], want[256];
	size_t wn = unhex(ack_hex, want, sizeof(want)), i, consumed;
	const unsigned char *p, *end;
	struct spop_writer w;
	struct spop_frame f;
	struct spop_str name;
	struct spop_data v;
	enum spop_status err;
	unsigned nargs, scope;
	int n;

	spop_writer_init(&w, buf, sizeof(buf));
	spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FLAG_FIN, ((uint64_t)1 << 32) + 1, 9);
	for (i = 0; i < ncases; i++)
		spop_put_set_var(&w, cases[i].scope, cases[i].name, strlen(cases[i].name), &cases[i].v);
	spop_put_unset_var(&w, SPOP_SCOPE_TXN, "gone", 4);
	n = spop_frame_end(&w);
	CHECK_EQ_INT(n, (int)wn);
	CHECK_EQ_INT(w.len, wn);
	CHECK(n == (int)wn && memcmp(buf, want, wn) == 0);

	CHECK_EQ_INT(spop_frame_decode(buf, (size_t)n, MFS, &f, &consumed, &err), 1);
	CHECK_EQ_INT(f.type, SPOP_FRAME_ACK);
	CHECK(f.stream_id == ((uint64_t)1 << 32) + 1 && f.frame_id == 9);
	p = f.payload;
	end = f.payload + f.payload_len;
	for (i = 0; i < ncases; i++) {
		CHECK_EQ_INT(read_action(&p, end, &nargs, &scope, &name, &v), SPOP_ACT_SET_VAR);
		CHECK_EQ_INT(nargs, 3);
		CHECK_EQ_INT(scope, cases[i].scope);
		CHECK(str_is(name, cases[i].name, strlen(cases[i].name)));
		CHECK(spop_data_eq(&v, &cases[i].v));
	}
	CHECK_EQ_INT(read_action(&p, end, &nargs, &scope, &name, &v), SPOP_ACT_UNSET_VAR);
	CHECK_EQ_INT(nargs, 2);
	CHECK_EQ_INT(scope, SPOP_SCOPE_TXN);
	CHECK(str_is(name, "gone", 4));
	CHECK(p == end);
}

static void test_ack_bad_value_type(void)
{
	unsigned char buf[64];
	struct spop_writer w;
	struct spop_data v = { .type = (enum spop_data_type)12 };

	spop_writer_init(&w, buf, sizeof(buf));
	spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FLAG_FIN, 1, 1);
	spop_put_set_var(&w, SPOP_SCOPE_TXN, "x", 1, &v);
	CHECK_EQ_INT(spop_frame_end(&w), -1);
	CHECK_EQ_INT(w.len, 0);
}

/* ---- AGENT-HELLO, DISCONNECT ---- */

static void test_agent_hello_matches_haproxy(void)
{
	/* the AGENT-HELLO HAProxy's own spop-check regression test answers with */
	static const char want_hex[] =
		"00000036 65 00000001 0000 0776657273696F6E 0803322E30"
		"0E6D61782D6672616D652D73697A65 03FCF006 0C6361706162696C6974696573 0800";
	unsigned char buf[128], want[128];
	size_t wn = unhex(want_hex, want, sizeof(want));
	struct spop_writer w;
	int n;

	spop_writer_init(&w, buf, sizeof(buf));
	n = spop_agent_hello_encode(&w, 16380, NULL);
	CHECK_EQ_INT(n, (int)wn);
	CHECK(n == (int)wn && memcmp(buf, want, wn) == 0);
}

static void test_agent_hello_fields(void)
{
	unsigned char buf[128];
	const unsigned char *p, *end;
	struct spop_writer w;
	struct spop_frame f;
	struct spop_str k;
	struct spop_data d;
	enum spop_status err;
	size_t consumed;
	int n;

	spop_writer_init(&w, buf, sizeof(buf));
	n = spop_agent_hello_encode(&w, 1024, "pipelining");
	CHECK(n > 0);
	CHECK_EQ_INT(spop_frame_decode(buf, (size_t)n, MFS, &f, &consumed, &err), 1);
	CHECK_EQ_INT(f.type, SPOP_FRAME_AGENT_HELLO);
	CHECK_EQ_INT(f.flags, SPOP_FLAG_FIN);
	CHECK(f.stream_id == 0 && f.frame_id == 0);
	p = f.payload;
	end = f.payload + f.payload_len;
	CHECK_EQ_INT(spop_kv_next(&p, end, &k, &d), 1);
	CHECK(str_is(k, "version", 7) && d.type == SPOP_DATA_STR && str_is(d.u.str, "2.0", 3));
	CHECK_EQ_INT(spop_kv_next(&p, end, &k, &d), 1);
	CHECK(str_is(k, "max-frame-size", 14) && d.type == SPOP_DATA_UINT32 && d.u.u32 == 1024);
	CHECK_EQ_INT(spop_kv_next(&p, end, &k, &d), 1);
	CHECK(str_is(k, "capabilities", 12) && str_is(d.u.str, "pipelining", 10));
	CHECK_EQ_INT(spop_kv_next(&p, end, &k, &d), 0);
}

static void test_disconnect_round_trip(void)
{
	char long_msg[400];
	unsigned char buf[512];
	struct spop_writer w;
	struct spop_frame f;
	struct spop_str msg;
	enum spop_status err;
	size_t consumed;
	uint32_t status = 0;
	int n;

	spop_writer_init(&w, buf, sizeof(buf));
	n = spop_agent_disconnect_encode(&w, SPOP_ERR_BAD_VSN, NULL);
	CHECK(n > 0);
	CHECK_EQ_INT(spop_frame_decode(buf, (size_t)n, MFS, &f, &consumed, &err), 1);
	CHECK_EQ_INT(f.type, SPOP_FRAME_AGENT_DISCONNECT);
	CHECK_EQ_INT(f.flags, SPOP_FLAG_FIN);
	CHECK_EQ_INT(spop_disconnect_parse(&f, &status, &msg), 0);
	CHECK_EQ_INT(status, SPOP_ERR_BAD_VSN);
	CHECK(str_is(msg, "unsupported version", 19));

	/* HAProxy rejects messages over 255 bytes: the encoder cuts them */
	memset(long_msg, 'x', sizeof(long_msg) - 1);
	long_msg[sizeof(long_msg) - 1] = '\0';
	spop_writer_init(&w, buf, sizeof(buf));
	n = spop_agent_disconnect_encode(&w, SPOP_ERR_RES, long_msg);
	CHECK(n > 0);
	CHECK_EQ_INT(spop_frame_decode(buf, (size_t)n, MFS, &f, &consumed, &err), 1);
	CHECK_EQ_INT(spop_disconnect_parse(&f, &status, &msg), 0);
	CHECK_EQ_INT(status, SPOP_ERR_RES);
	CHECK_EQ_INT(msg.len, SPOP_DISCONNECT_MSG_MAX);
}

static void test_disconnect_from_haproxy(void)
{
	unsigned char buf[128];
	struct spop_frame f;
	struct spop_str msg;
	enum spop_status err;
	size_t consumed, n;
	uint32_t status = 0;

	/* status-code 2, message "a timeout occurred" */
	n = unhex("00000031 02 00000001 00 00"
	          "0b7374617475732d636f6465 03 02"
	          "076d657373616765 08 12612074696d656f7574206f63637572726564", buf, sizeof(buf));
	CHECK_EQ_INT(spop_frame_decode(buf, n, MFS, &f, &consumed, &err), 1);
	CHECK_EQ_INT(spop_disconnect_parse(&f, &status, &msg), 0);
	CHECK_EQ_INT(status, SPOP_ERR_TOUT);
	CHECK(str_is(msg, "a timeout occurred", 18));

	/* the same payload in a NOTIFY is not a DISCONNECT */
	f.type = SPOP_FRAME_NOTIFY;
	CHECK_EQ_INT(spop_disconnect_parse(&f, &status, &msg), -1);
	f.type = SPOP_FRAME_HAPROXY_DISCONNECT;
	/* nor is a fragment, or one with ids */
	f.flags = 0;
	CHECK_EQ_INT(spop_disconnect_parse(&f, &status, &msg), -1);
	f.flags = SPOP_FLAG_FIN;
	f.frame_id = 1;
	CHECK_EQ_INT(spop_disconnect_parse(&f, &status, &msg), -1);

	/* status code 2^32 does not fit */
	n = unhex("00000024 02 00000001 00 00 0b7374617475732d636f6465 05 f0f1fefe7e"
	          "076d657373616765 08 01 78", buf, sizeof(buf));
	CHECK_EQ_INT(spop_frame_decode(buf, n, MFS, &f, &consumed, &err), 1);
	CHECK_EQ_INT(spop_disconnect_parse(&f, &status, &msg), -1);
	buf[n - 16] = 0xff; /* 2^32 - 1 (ff f0 fe fe 7e) does */
	buf[n - 15] = 0xf0;
	CHECK_EQ_INT(spop_frame_decode(buf, n, MFS, &f, &consumed, &err), 1);
	CHECK_EQ_INT(spop_disconnect_parse(&f, &status, &msg), 0);
	CHECK(status == UINT32_MAX);

	/* without its message */
	n = unhex("00000015 02 00000001 00 00 0b7374617475732d636f6465 03 02", buf, sizeof(buf));
	CHECK_EQ_INT(spop_frame_decode(buf, n, MFS, &f, &consumed, &err), 1);
	CHECK_EQ_INT(spop_disconnect_parse(&f, &status, &msg), -1);

	/* without its status code */
	n = unhex("00000013 02 00000001 00 00 076d657373616765 08 02 6f6b", buf, sizeof(buf));
	CHECK_EQ_INT(spop_frame_decode(buf, n, MFS, &f, &consumed, &err), 1);
	CHECK_EQ_INT(spop_disconnect_parse(&f, &status, &msg), -1);

	/* a status code that is not an integer */
	n = unhex("00000017 02 00000001 00 00 0b7374617475732d636f6465 08 02 3939", buf, sizeof(buf));
	CHECK_EQ_INT(spop_frame_decode(buf, n, MFS, &f, &consumed, &err), 1);
	CHECK_EQ_INT(spop_disconnect_parse(&f, &status, &msg), -1);
}

/* ---- writer ---- */

#define CANARY 0xa5

static void test_writer_overflow(void)
{
	unsigned char ref[128], buf[128 + 16];
	struct spop_writer w;
	int full, cap;

	spop_writer_init(&w, ref, sizeof(ref));
	full = spop_agent_hello_encode(&w, MFS, "pipelining");
	CHECK(full > 0);

	for (cap = 0; cap < full; cap++) {
		size_t i;
		int intact = 1;

		memset(buf, CANARY, sizeof(buf));
		spop_writer_init(&w, buf, (size_t)cap);
		CHECK_EQ_INT(spop_agent_hello_encode(&w, MFS, "pipelining"), -1);
		CHECK_EQ_INT(w.len, 0);
		CHECK_EQ_INT(w.overflow, 0);
		for (i = (size_t)cap; i < sizeof(buf); i++)
			intact &= buf[i] == CANARY;
		CHECK(intact);
	}

	memset(buf, CANARY, sizeof(buf));
	spop_writer_init(&w, buf, (size_t)full);
	CHECK_EQ_INT(spop_agent_hello_encode(&w, MFS, "pipelining"), full);
	CHECK(memcmp(buf, ref, (size_t)full) == 0);
	CHECK_EQ_INT(buf[full], CANARY);
}

static void test_writer_back_to_back(void)
{
	unsigned char buf[256];
	struct spop_writer w;
	struct spop_frame f;
	enum spop_status err;
	size_t consumed;
	int a, b, c;

	spop_writer_init(&w, buf, sizeof(buf));
	a = spop_agent_hello_encode(&w, MFS, "pipelining");
	b = spop_agent_disconnect_encode(&w, SPOP_ERR_NONE, NULL);
	CHECK(a > 0 && b > 0);
	CHECK_EQ_INT(w.len, (size_t)(a + b));
	CHECK_EQ_INT(spop_frame_decode(buf, w.len, MFS, &f, &consumed, &err), 1);
	CHECK_EQ_INT(consumed, a);
	CHECK_EQ_INT(spop_frame_decode(buf + a, w.len - (size_t)a, MFS, &f, &consumed, &err), 1);
	CHECK_EQ_INT(consumed, b);
	CHECK_EQ_INT(f.type, SPOP_FRAME_AGENT_DISCONNECT);

	/* a second frame that does not fit is dropped; the first one stays whole */
	spop_writer_init(&w, buf, (size_t)a + 11);
	CHECK_EQ_INT(spop_agent_hello_encode(&w, MFS, "pipelining"), a);
	CHECK_EQ_INT(spop_agent_disconnect_encode(&w, SPOP_ERR_NONE, NULL), -1);
	CHECK_EQ_INT(w.len, a);
	/* and the writer is usable again */
	spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FLAG_FIN, 1, 2);
	c = spop_frame_end(&w);
	CHECK_EQ_INT(c, 11);
	CHECK_EQ_INT(w.len, (size_t)a + 11);
	CHECK_EQ_INT(spop_frame_decode(buf + a, w.len - (size_t)a, MFS, &f, &consumed, &err), 1);
	CHECK(f.type == SPOP_FRAME_ACK && f.stream_id == 1 && f.frame_id == 2);
}

static void test_status_str(void)
{
	CHECK_EQ_STR(spop_status_str(SPOP_ERR_NONE), "normal");
	CHECK_EQ_STR(spop_status_str(SPOP_ERR_TOO_BIG), "frame is too big");
	CHECK_EQ_STR(spop_status_str(SPOP_ERR_FRAMEID_NOTFOUND), "frame-id not found");
	CHECK_EQ_STR(spop_status_str(SPOP_ERR_UNKNOWN), "an unknown error occurred");
	CHECK_EQ_STR(spop_status_str((enum spop_status)42), "an unknown error occurred");
}

int main(void)
{
	RUN(test_varint_boundaries);
	RUN(test_varint_known_bytes);
	RUN(test_varint_rejects);
	RUN(test_varint_encode_small_buffer);
	RUN(test_frame_need_more);
	RUN(test_frame_too_big);
	RUN(test_frame_too_short);
	RUN(test_frame_back_to_back);
	RUN(test_frame_big_ids);
	RUN(test_hello_normal);
	RUN(test_hello_healthcheck);
	RUN(test_hello_missing_keys);
	RUN(test_hello_versions);
	RUN(test_hello_frame_size);
	RUN(test_hello_value_types);
	RUN(test_hello_header_rules);
	RUN(test_notify_messages);
	RUN(test_notify_truncated);
	RUN(test_msg_malformed);
	RUN(test_data_decode_errors);
	RUN(test_data_decode_int32_limits);
	RUN(test_ack_encode);
	RUN(test_ack_bad_value_type);
	RUN(test_agent_hello_matches_haproxy);
	RUN(test_agent_hello_fields);
	RUN(test_disconnect_round_trip);
	RUN(test_disconnect_from_haproxy);
	RUN(test_writer_overflow);
	RUN(test_writer_back_to_back);
	RUN(test_status_str);
	return UNIT_DONE();
}
