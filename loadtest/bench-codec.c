/* bench-codec: the peer-input parsers on the request path, in operations per second,
 * on the inputs the fuzzers start from (tests/fuzz/corpus): SPOP NOTIFY frames decoded
 * down to every argument, the agent's ACK with its set-vars encoded, HAProxy's log
 * records parsed, and the usage read from each record (SSE captures, unary fields), and
 * the HMAC check that vouches for a record (gwsecret.h).
 * Single-threaded; each figure is the best of 3 runs of BENCH_MS (default 300) ms.
 * Run from the repository's root (make bench-codec). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gwsecret.h"
#include "record.h"
#include "spop.h"
#include "usage.h"

#define BENCH_ROUNDS 3
#define BENCH_INPUT_MAX 65536

struct bench_input {
	char buf[BENCH_INPUT_MAX];
	size_t len;
};

static double bench_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Reads tests/fuzz/corpus/<dir>/<name> into in. 0 or -1 (reported). */
static int bench_load(const char *dir, const char *name, struct bench_input *in)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "tests/fuzz/corpus/%s/%s", dir, name);
	f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return -1;
	}
	in->len = fread(in->buf, 1, sizeof(in->buf), f);
	fclose(f);
	return in->len ? 0 : -1;
}

/* Decodes every frame of in, and every message and argument of its NOTIFYs. Returns
 * the arguments read (so that nothing is optimised away), -1 if malformed. */
static long bench_spop_decode(const struct bench_input *in)
{
	const unsigned char *buf = (const unsigned char *)in->buf;
	size_t at = 0, used;
	long args = 0;

	while (at < in->len) {
		struct spop_frame f;
		enum spop_status err;
		const unsigned char *p, *end;
		struct spop_msg m;

		if (spop_frame_decode(buf + at, in->len - at, 16380, &f, &used, &err) != 1)
			return -1;
		at += used;
		if (f.type != SPOP_FRAME_NOTIFY)
			continue;
		p = f.payload;
		end = f.payload + f.payload_len;
		while (spop_msg_next(&p, end, &m) == 1) {
			const unsigned char *a = m.args;
			struct spop_str k;
			struct spop_data d;

			while (spop_kv_next(&a, m.args_end, &k, &d) == 1)
				args++;
		}
	}
	return args;
}

/* The agent's answer to an admitted request: an ACK with its set-vars. */
static long bench_spop_encode(unsigned char *buf, size_t cap)
{
	static const char *const names[] = { "verdict", "backend", "model", "provider", "key" };
	static const char *const values[] = { "allow", "be_openai", "gpt-4o-mini", "openai",
	                                      "3" };
	struct spop_writer w;
	size_t i;

	spop_writer_init(&w, buf, cap);
	spop_frame_begin(&w, SPOP_FRAME_ACK, SPOP_FLAG_FIN, 4242, 1);
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		struct spop_data d = { .type = SPOP_DATA_STR };

		d.u.str.ptr = values[i];
		d.u.str.len = strlen(values[i]);
		spop_put_set_var(&w, SPOP_SCOPE_TXN, names[i], strlen(names[i]), &d);
	}
	return spop_frame_end(&w);
}

/* Parses the record in, then its usage as the intake does. Returns the tokens found. */
static long bench_record(const struct bench_input *in)
{
	struct record r;
	struct usage u;

	if (record_parse(in->buf, in->len, &r) < 0)
		return -1;
	if (r.has_capture)
		usage_from_capture(r.summary.ptr, r.summary.len, r.cap_kind == 's', &u);
	else
		usage_from_fields(&r, &u);
	return (long)(u.prompt_tokens + u.completion_tokens);
}

/* Parses the record in and checks its MAC, as the intake does before anything else.
 * The corpus input is MACed under the secret derived from { 1, 0, ... }. */
static long bench_authentic(const struct bench_input *in)
{
	static struct gwsecret_mac *m;
	struct record r;

	if (!m) {
		unsigned char key[KEYHASH_SECRET_LEN] = { 1 };
		struct gwsecret s;

		gwsecret_derive(key, &s);
		if (!(m = gwsecret_mac_new(&s)))
			return -1;
	}
	if (record_parse(in->buf, in->len, &r) < 0 || !record_authentic(&r, m))
		return -1;
	return (long)r.id.len;
}

enum bench_kind { BENCH_DECODE, BENCH_ENCODE, BENCH_RECORD, BENCH_AUTHENTIC };

/* Operations per second of one kind on in, best of BENCH_ROUNDS; -1 if it fails. */
static double bench_run(enum bench_kind kind, const struct bench_input *in, double ms)
{
	static unsigned char out[16384];
	volatile long sink = 0;
	double best = 0;
	int round;

	for (round = 0; round < BENCH_ROUNDS; round++) {
		double t0 = bench_now(), t;
		long n = 0, v;

		do {
			for (int i = 0; i < 256; i++, n++) {
				v = kind == BENCH_DECODE ? bench_spop_decode(in) :
				    kind == BENCH_ENCODE ? bench_spop_encode(out, sizeof(out)) :
				    kind == BENCH_RECORD ? bench_record(in) : bench_authentic(in);
				if (v < 0)
					return -1;
				sink += v;
			}
			t = bench_now() - t0;
		} while (t * 1000 < ms);
		if ((double)n / t > best)
			best = (double)n / t;
	}
	(void)sink;
	return best;
}

int main(void)
{
	static const struct {
		enum bench_kind kind;
		const char *dir, *name, *what;
	} cases[] = {
		{ BENCH_DECODE, "spop", "notify-all-types.bin", "SPOP NOTIFY decoded, every argument" },
		{ BENCH_ENCODE, NULL, NULL, "SPOP ACK encoded, 5 set-vars" },
		{ BENCH_RECORD, "record", "openai_unary", "record + usage, OpenAI unary" },
		{ BENCH_RECORD, "record", "openai_stream", "record + usage, OpenAI stream capture" },
		{ BENCH_RECORD, "record", "anthropic_stream", "record + usage, Anthropic stream" },
		{ BENCH_AUTHENTIC, "record", "openai_unary_authentic", "record + its MAC, OpenAI unary" },
	};
	const char *env = getenv("BENCH_MS");
	double ms = env ? atof(env) : 300;
	static struct bench_input in;
	size_t i;
	int rc = 0;

	if (ms <= 0)
		ms = 300;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		double ops;

		in.len = 0;
		if (cases[i].dir && bench_load(cases[i].dir, cases[i].name, &in) < 0)
			return 2;
		ops = bench_run(cases[i].kind, &in, ms);
		if (ops < 0) {
			fprintf(stderr, "bench-codec: %s: the input does not parse\n", cases[i].what);
			rc = 1;
			continue;
		}
		printf("%-42s %12.0f /s  %8.0f ns each  (%zu input bytes)\n", cases[i].what, ops,
		       1e9 / ops, in.len);
	}
	return rc;
}
