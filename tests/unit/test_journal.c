/* Unit tests of journal: the entry codec (against a format built by hand here), replay
 * after a real kill -9, damaged files, epoch rotation and deletion, concurrent
 * producers with a releasing thread, and the error path when the directory vanishes. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "journal.h"
#include "price.h"
#include "log.h"
#include "stats.h"
#include "tmpdir.h"
#include "unit.h"

static const char *const log_names[] = { "io0", "io1", "intake" };

/* A typical row, different for every (log, seq). */
static void row_fill(struct acct_row *r, const char *log, int seq)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->request_id, sizeof(r->request_id), "%s-%05d", log, seq);
	r->key_id = seq % 7 ? seq : ACCT_NONE;
	snprintf(r->model, sizeof(r->model), "gpt-4o-mini-2024-07-18");
	snprintf(r->model_requested, sizeof(r->model_requested), "gpt-4o-mini");
	snprintf(r->provider, sizeof(r->provider), "openai");
	snprintf(r->verdict, sizeof(r->verdict), "allow");
	snprintf(r->termination, sizeof(r->termination), "--");
	r->status = 200;
	r->stream = seq % 3 - 1;
	r->prompt_tokens = 1000 + seq;
	r->completion_tokens = 200 + seq;
	r->cached_tokens = ACCT_NONE;
	r->cache_creation_tokens = 0;
	r->reasoning_tokens = seq;
	r->cost_micros = seq * 13;
	r->unpriced = seq & 1;
	r->outcome = (enum acct_outcome)(seq % ACCT_OUTCOME_COUNT);
	r->usage_source = (enum acct_usage_source)(seq % ACCT_USAGE_SOURCE_COUNT);
	r->started_at_ms = 1733000000000 + seq;
	r->duration_ms = 1234;
	r->ttfb_ms = 56;
	r->bytes_in = 1024;
	r->bytes_out = 4096 + seq;
	r->flags = seq & 3;
	if (seq & 2)
		snprintf(r->response_id, sizeof(r->response_id), "resp_%d", seq);
	if (seq & 4)
		snprintf(r->model_reported, sizeof(r->model_reported), "echoed-%d", seq);
	r->priced_fallback = (unsigned)seq & PRICE_FALLBACK_TIER;
}

/* Checks every stored field; returns whether all matched. */
static int row_check_eq(const struct acct_row *a, const struct acct_row *b)
{
	int before = unit_failed_checks;

	CHECK_EQ_STR(a->request_id, b->request_id);
	CHECK_EQ_INT(a->key_id, b->key_id);
	CHECK_EQ_STR(a->model, b->model);
	CHECK_EQ_STR(a->model_requested, b->model_requested);
	CHECK_EQ_STR(a->provider, b->provider);
	CHECK_EQ_STR(a->verdict, b->verdict);
	CHECK_EQ_STR(a->termination, b->termination);
	CHECK_EQ_INT(a->status, b->status);
	CHECK_EQ_INT(a->stream, b->stream);
	CHECK_EQ_INT(a->prompt_tokens, b->prompt_tokens);
	CHECK_EQ_INT(a->completion_tokens, b->completion_tokens);
	CHECK_EQ_INT(a->cached_tokens, b->cached_tokens);
	CHECK_EQ_INT(a->cache_creation_tokens, b->cache_creation_tokens);
	CHECK_EQ_INT(a->reasoning_tokens, b->reasoning_tokens);
	CHECK_EQ_INT(a->cost_micros, b->cost_micros);
	CHECK_EQ_INT(a->unpriced, b->unpriced);
	CHECK_EQ_INT(a->outcome, b->outcome);
	CHECK_EQ_INT(a->usage_source, b->usage_source);
	CHECK_EQ_INT(a->started_at_ms, b->started_at_ms);
	CHECK_EQ_INT(a->duration_ms, b->duration_ms);
	CHECK_EQ_INT(a->ttfb_ms, b->ttfb_ms);
	CHECK_EQ_INT(a->bytes_in, b->bytes_in);
	CHECK_EQ_INT(a->bytes_out, b->bytes_out);
	CHECK_EQ_INT(a->flags, b->flags);
	CHECK_EQ_STR(a->response_id, b->response_id);
	CHECK_EQ_STR(a->model_reported, b->model_reported);
	CHECK_EQ_INT(a->priced_fallback, b->priced_fallback);
	return unit_failed_checks == before;
}

static size_t encode_decode(enum journal_kind k, const struct acct_row *in, struct acct_row *out)
{
	unsigned char buf[JOURNAL_ENTRY_MAX];
	enum journal_kind got = 0;
	size_t n = journal_entry_encode(k, in, buf, sizeof(buf)), used = 0, i;

	CHECK(n > 0);
	CHECK_EQ_INT(journal_entry_decode(buf, n, &got, out, &used), 1);
	CHECK_EQ_INT(used, n);
	CHECK_EQ_INT(got, k);
	for (i = 0; i < n; i++)
		CHECK_EQ_INT(journal_entry_decode(buf, i, &got, out, &used), 0);
	CHECK_EQ_INT(journal_entry_decode(buf, n, &got, out, &used), 1);
	return n;
}

static void fill_str(char *s, size_t cap, char c)
{
	memset(s, c, cap - 1);
	s[cap - 1] = '\0';
}

static void test_roundtrip(void)
{
	struct acct_row in, out;
	unsigned char buf[JOURNAL_ENTRY_MAX];
	size_t n;

	row_fill(&in, "io0", 42);
	encode_decode(JOURNAL_DECISION, &in, &out);
	row_check_eq(&in, &out);
	CHECK_EQ_INT(out.journal_epoch[0], 0);

	/* Unknown values (ACCT_NONE) and empty strings. */
	memset(&in, 0, sizeof(in));
	snprintf(in.request_id, sizeof(in.request_id), "x");
	in.key_id = in.prompt_tokens = in.completion_tokens = in.cached_tokens = ACCT_NONE;
	in.cache_creation_tokens = in.reasoning_tokens = in.cost_micros = ACCT_NONE;
	in.started_at_ms = in.duration_ms = in.ttfb_ms = in.bytes_in = in.bytes_out = ACCT_NONE;
	in.stream = ACCT_NONE;
	in.journal_epoch[0] = in.journal_epoch[1] = 7;
	encode_decode(JOURNAL_ROW, &in, &out);
	row_check_eq(&in, &out);
	CHECK_EQ_INT(out.journal_epoch[1], 0);

	/* The largest row: every string full, every integer at its widest. */
	fill_str(in.request_id, sizeof(in.request_id), 'i');
	fill_str(in.model, sizeof(in.model), 'm');
	fill_str(in.model_requested, sizeof(in.model_requested), 'r');
	fill_str(in.provider, sizeof(in.provider), 'p');
	fill_str(in.verdict, sizeof(in.verdict), 'v');
	fill_str(in.termination, sizeof(in.termination), 't');
	fill_str(in.response_id, sizeof(in.response_id), 'x');
	fill_str(in.model_reported, sizeof(in.model_reported), 'e');
	in.priced_fallback = (PRICE_FALLBACK_TIER << 1) - 1;
	in.flags = 3;
	in.key_id = in.prompt_tokens = in.completion_tokens = in.cached_tokens = INT64_MIN;
	in.cache_creation_tokens = in.reasoning_tokens = in.cost_micros = INT64_MAX;
	in.started_at_ms = in.duration_ms = in.ttfb_ms = in.bytes_in = in.bytes_out = INT64_MIN;
	in.status = INT_MIN;
	in.stream = INT_MAX;
	in.unpriced = INT_MIN;
	in.outcome = ACCT_OUTCOME_COUNT - 1;
	in.usage_source = ACCT_USAGE_SOURCE_COUNT - 1;
	n = encode_decode(JOURNAL_ROW, &in, &out);
	row_check_eq(&in, &out);
	CHECK(n <= JOURNAL_ENTRY_MAX);
	CHECK_EQ_INT(journal_entry_encode(JOURNAL_ROW, &in, buf, n - 1), 0);

	/* A string filling its field without a NUL is cut, never overrun. */
	memset(in.request_id, 'z', sizeof(in.request_id));
	memset(in.termination, 'T', sizeof(in.termination));
	encode_decode(JOURNAL_ROW, &in, &out);
	CHECK_EQ_INT(strlen(out.request_id), ACCT_ID_MAX - 1);
	CHECK_EQ_STR(out.termination, "TTTTTTT");

	/* Out-of-range kinds and enums are refused, not stored. */
	row_fill(&in, "io0", 1);
	CHECK_EQ_INT(journal_entry_encode(0, &in, buf, sizeof(buf)), 0);
	CHECK_EQ_INT(journal_entry_encode(3, &in, buf, sizeof(buf)), 0);
	in.outcome = ACCT_OUTCOME_COUNT;
	CHECK_EQ_INT(journal_entry_encode(JOURNAL_ROW, &in, buf, sizeof(buf)), 0);
	in.outcome = ACCT_COMPLETE;
	in.usage_source = (enum acct_usage_source)-1;
	CHECK_EQ_INT(journal_entry_encode(JOURNAL_ROW, &in, buf, sizeof(buf)), 0);
}

/* ---- the format, written by hand (an oracle independent of the encoder) ---- */

struct hand {
	unsigned char b[2048];
	size_t len;
};

static void hand_varint(struct hand *h, uint64_t v)
{
	do {
		h->b[h->len++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v);
}

static void hand_str(struct hand *h, const char *s, size_t n)
{
	hand_varint(h, n);
	memcpy(h->b + h->len, s, n);
	h->len += n;
}

static uint64_t hand_zz(int64_t v)
{
	return v < 0 ? (uint64_t)(-(v + 1)) * 2 + 1 : (uint64_t)v * 2;
}

struct hand_spec {
	const char *id;
	size_t id_len;
	int64_t status;
	uint64_t outcome;
	int trailing;        /* bytes of junk after the last field */
	int appended;        /* with the fields appended after the first release: 1 the
	                      * estimates, 2 the flags and stored response's id too */
};

/* A whole entry: payload per the format, then header with FNV-1a (written afresh). */
static size_t hand_entry(unsigned char *out, int kind, const struct hand_spec *s)
{
	struct hand p = { .len = 0 };
	uint32_t h = 2166136261u;
	size_t i;
	int f;

	hand_str(&p, s->id, s->id_len);
	hand_varint(&p, hand_zz(5));                       /* key_id */
	hand_str(&p, "gpt-4o", 6);
	hand_str(&p, "gpt-4o", 6);
	hand_str(&p, "openai", 6);
	hand_str(&p, "allow", 5);
	hand_str(&p, "--", 2);
	hand_varint(&p, hand_zz(s->status));
	hand_varint(&p, hand_zz(-1));                      /* stream */
	for (f = 0; f < 6; f++)                            /* tokens and cost */
		hand_varint(&p, hand_zz(100 * f - 1));
	hand_varint(&p, hand_zz(0));                       /* unpriced */
	hand_varint(&p, s->outcome);
	hand_varint(&p, ACCT_USAGE_STREAM);
	for (f = 0; f < 5; f++)                            /* times and bytes */
		hand_varint(&p, hand_zz(1733000000000 + f));
	for (f = 0; s->appended && f < 4; f++)             /* estimates */
		hand_varint(&p, hand_zz(7 + f));
	if (s->appended > 1) {
		hand_varint(&p, ACCT_FLAG_CREATES_RESPONSE);   /* flags */
		hand_str(&p, "resp_1", 6);
	}
	for (f = 0; f < s->trailing; f++)
		p.b[p.len++] = 0;
	h = (h ^ (unsigned char)kind) * 16777619u;
	for (i = 0; i < p.len; i++)
		h = (h ^ p.b[i]) * 16777619u;
	out[0] = (unsigned char)p.len;
	out[1] = (unsigned char)(p.len >> 8);
	out[2] = (unsigned char)kind;
	for (i = 0; i < 4; i++)
		out[3 + i] = (unsigned char)(h >> (8 * i));
	memcpy(out + 7, p.b, p.len);
	return 7 + p.len;
}

static int decode(const unsigned char *b, size_t n, struct acct_row *row)
{
	enum journal_kind k;
	size_t used;

	return journal_entry_decode(b, n, &k, row, &used);
}

static void test_decode_format(void)
{
	static const char long_id[ACCT_ID_MAX + 1] =
		"0123456789012345678901234567890123456789012345678901234567890123";
	struct hand_spec ok = { "req-1", 5, 200, ACCT_COMPLETE, 0, 0 }, s;
	unsigned char b[4096];
	struct acct_row row;
	size_t n;

	n = hand_entry(b, JOURNAL_ROW, &ok);
	CHECK_EQ_INT(decode(b, n, &row), 1);
	CHECK_EQ_STR(row.request_id, "req-1");
	CHECK_EQ_INT(row.key_id, 5);
	CHECK_EQ_STR(row.verdict, "allow");
	CHECK_EQ_INT(row.stream, -1);
	CHECK_EQ_INT(row.prompt_tokens, -1);
	CHECK_EQ_INT(row.cost_micros, 499);
	CHECK_EQ_INT(row.usage_source, ACCT_USAGE_STREAM);
	CHECK_EQ_INT(row.bytes_out, 1733000000004);
	/* An entry of the first release: the appended estimates read as absent. */
	CHECK_EQ_INT(row.estimated_tokens, ACCT_NONE);
	CHECK_EQ_INT(row.est_completion_tokens, ACCT_NONE);
	s = ok;
	s.appended = 1;
	n = hand_entry(b, JOURNAL_ROW, &s);
	CHECK_EQ_INT(decode(b, n, &row), 1);
	CHECK_EQ_INT(row.estimated_tokens, 7);
	CHECK_EQ_INT(row.estimated_cost_micros, 8);
	CHECK_EQ_INT(row.est_prompt_tokens, 9);
	CHECK_EQ_INT(row.est_completion_tokens, 10);
	CHECK_EQ_INT(row.flags, 0);
	CHECK_EQ_STR(row.response_id, "");
	s.appended = 2;
	n = hand_entry(b, JOURNAL_ROW, &s);
	CHECK_EQ_INT(decode(b, n, &row), 1);
	CHECK_EQ_INT(row.est_completion_tokens, 10);
	CHECK_EQ_INT(row.flags, ACCT_FLAG_CREATES_RESPONSE);
	CHECK_EQ_STR(row.response_id, "resp_1");
	/* Entries from before the reported model and the fallbacks: none of either. */
	CHECK_EQ_STR(row.model_reported, "");
	CHECK_EQ_INT(row.priced_fallback, 0);
	/* Junk after any form, or some of the appended fields only, is no entry. */
	s.trailing = 1;
	CHECK_EQ_INT(decode(b, hand_entry(b, JOURNAL_ROW, &s), &row), -1);
	s.appended = 1;
	CHECK_EQ_INT(decode(b, hand_entry(b, JOURNAL_ROW, &s), &row), -1);

	s = ok;
	s.id_len = ACCT_ID_MAX - 1;
	s.id = long_id;
	n = hand_entry(b, JOURNAL_ROW, &s);
	CHECK_EQ_INT(decode(b, n, &row), 1);
	CHECK_EQ_INT(strlen(row.request_id), ACCT_ID_MAX - 1);
	s.id_len = ACCT_ID_MAX;                            /* no room for the NUL */
	CHECK_EQ_INT(decode(b, hand_entry(b, JOURNAL_ROW, &s), &row), -1);
	s = ok;
	s.id = "a\0b";
	s.id_len = 3;
	CHECK_EQ_INT(decode(b, hand_entry(b, JOURNAL_ROW, &s), &row), -1);
	s = ok;
	s.outcome = ACCT_OUTCOME_COUNT;
	CHECK_EQ_INT(decode(b, hand_entry(b, JOURNAL_ROW, &s), &row), -1);
	s.outcome = UINT64_MAX;
	CHECK_EQ_INT(decode(b, hand_entry(b, JOURNAL_ROW, &s), &row), -1);
	s = ok;
	s.status = (int64_t)INT_MAX + 1;
	CHECK_EQ_INT(decode(b, hand_entry(b, JOURNAL_ROW, &s), &row), -1);
	s = ok;
	s.trailing = 1;
	CHECK_EQ_INT(decode(b, hand_entry(b, JOURNAL_ROW, &s), &row), -1);
	CHECK_EQ_INT(decode(b, hand_entry(b, 3, &ok), &row), -1);
	CHECK_EQ_INT(decode(b, hand_entry(b, 0, &ok), &row), -1);

	/* A flipped bit anywhere after the length fails the checksum or the kind. */
	n = hand_entry(b, JOURNAL_DECISION, &ok);
	for (size_t i = 2; i < n; i++) {
		b[i] ^= 0x10;
		CHECK_EQ_INT(decode(b, n, &row), -1);
		b[i] ^= 0x10;
	}
	/* A length beyond any row is corrupt at once, not waited for. */
	b[0] = 0xff;
	b[1] = 0xff;
	CHECK_EQ_INT(decode(b, 7, &row), -1);
	/* An 11-byte varint. */
	memset(b, 0, sizeof(b));
	b[0] = 11;
	b[2] = JOURNAL_ROW;
	memset(b + 7, 0x80, 10);
	b[17] = 0x01;
	{
		uint32_t h = (2166136261u ^ JOURNAL_ROW) * 16777619u;

		for (int i = 0; i < 11; i++)
			h = (h ^ b[7 + i]) * 16777619u;
		for (int i = 0; i < 4; i++)
			b[3 + i] = (unsigned char)(h >> (8 * i));
	}
	CHECK_EQ_INT(decode(b, 18, &row), -1);
}

/* ---- files ---- */

/* Number of segment files in the test directory whose name contains needle. */
static int seg_count(const char *needle)
{
	DIR *d = opendir(tmpdir_path);
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d))) {
		size_t len = strlen(e->d_name);

		if (len > 2 && strcmp(e->d_name + len - 2, ".j") == 0 &&
		    (!needle || strstr(e->d_name, needle)))
			n++;
	}
	if (d)
		closedir(d);
	return n;
}

/* Number of files of epoch e of log name. */
static int epoch_files(uint32_t e, const char *name)
{
	char needle[64];

	snprintf(needle, sizeof(needle), "-%010" PRIu32 "-%s.j", e, name);
	return seg_count(needle);
}

/* The name of the one segment file there (into buf); 0 or -1. */
static int seg_name(char *buf, size_t cap)
{
	DIR *d = opendir(tmpdir_path);
	struct dirent *e;
	int rc = -1;

	while (d && (e = readdir(d))) {
		size_t len = strlen(e->d_name);

		if (len > 2 && strcmp(e->d_name + len - 2, ".j") == 0) {
			snprintf(buf, cap, "%s", e->d_name);
			rc = 0;
		}
	}
	if (d)
		closedir(d);
	return rc;
}

static int file_put(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	int rc;

	if (!f)
		return -1;
	rc = fwrite(p, 1, n, f) == n ? 0 : -1;
	return fclose(f) == 0 ? rc : -1;
}

static unsigned char *file_get(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	unsigned char *p = malloc(1 << 20);

	*n = f && p ? fread(p, 1, 1 << 20, f) : 0;
	if (f)
		fclose(f);
	return p;
}

struct seen {
	int next[3];          /* next expected seq per log_names entry */
	int bad;
	long n;
};

static void seen_cb(void *arg, enum journal_kind k, const struct acct_row *row)
{
	struct seen *s = arg;
	struct acct_row want;
	int i, seq;

	s->n++;
	for (i = 0; i < 3; i++) {
		size_t len = strlen(log_names[i]);

		if (strncmp(row->request_id, log_names[i], len) == 0 && row->request_id[len] == '-')
			break;
	}
	if (i == 3 || sscanf(strchr(row->request_id, '-') + 1, "%d", &seq) != 1) {
		s->bad++;
		return;
	}
	row_fill(&want, log_names[i], seq);
	if (seq != s->next[i] || k != (i == 2 ? JOURNAL_ROW : JOURNAL_DECISION) ||
	    !row_check_eq(row, &want))
		s->bad++;
	s->next[i] = seq + 1;
}

#define CRASH_ENTRIES 600

/* The child journals from three logs over several epochs, flushing as the agent
 * would, then dies by SIGKILL with a few entries still buffered. */
static void crash_child(void)
{
	struct journal_log *l[3];
	struct acct_row row;
	struct journal *j;
	char err[256];
	int i, li;

	if (!(j = journal_open(tmpdir_path, 0, err, sizeof(err))))
		_exit(2);
	for (li = 0; li < 3; li++)
		if (!(l[li] = journal_log_open(j, log_names[li])))
			_exit(3);
	for (i = 0; i < CRASH_ENTRIES; i++) {
		for (li = 0; li < 3; li++) {
			row_fill(&row, log_names[li], i);
			journal_append(l[li], li == 2 ? JOURNAL_ROW : JOURNAL_DECISION, &row);
			if (li == 2 || i % 16 == 15 || i == CRASH_ENTRIES - 1)
				journal_flush(l[li]);
		}
		if (i % 150 == 149)
			journal_tick(j);
	}
	for (i = CRASH_ENTRIES; i < CRASH_ENTRIES + 5; i++) {
		row_fill(&row, "io0", i);
		journal_append(l[0], JOURNAL_DECISION, &row);
	}
	raise(SIGKILL);
	_exit(4);
}

static void test_crash_replay(void)
{
	struct seen s = { .n = 0 };
	struct journal_log *l;
	struct acct_row row;
	struct journal *j;
	char err[256];
	int status = 0;
	uint32_t e;
	pid_t pid;

	if (tmpdir_make("journal") < 0) {
		CHECK(0);
		return;
	}
	pid = fork();
	if (pid == 0)
		crash_child();
	CHECK(pid > 0);
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	CHECK_EQ_INT(seg_count("-0000000004-"), 3);   /* the ticks made four epochs */

	j = journal_open(tmpdir_path, 3600, err, sizeof(err));
	CHECK(j != NULL);
	if (!j)
		goto out;
	CHECK_EQ_INT(journal_replay(j, seen_cb, &s), 3 * CRASH_ENTRIES);
	CHECK_EQ_INT(s.n, 3 * CRASH_ENTRIES);
	CHECK_EQ_INT(s.bad, 0);
	CHECK_EQ_INT(s.next[0], CRASH_ENTRIES);       /* the unflushed ones are gone */
	CHECK_EQ_INT(s.next[1], CRASH_ENTRIES);
	CHECK_EQ_INT(s.next[2], CRASH_ENTRIES);
	CHECK_EQ_INT(journal_replay_damaged(j), 0);

	/* Re-journal one entry, then let go of the old files: only the new one stays. */
	l = journal_log_open(j, "io0");
	row_fill(&row, "io0", 7);
	e = journal_append(l, JOURNAL_DECISION, &row);
	CHECK_EQ_INT(journal_flush(l), 0);
	journal_replay_done(j);
	CHECK_EQ_INT(seg_count(NULL), 1);
	CHECK_EQ_INT(epoch_files(1, "io0"), 1);
	journal_log_close(l);
	journal_release(j, e);
	journal_close(j);
	CHECK_EQ_INT(seg_count(NULL), 0);
out:
	tmpdir_remove();
}

static void count_cb(void *arg, enum journal_kind k, const struct acct_row *row)
{
	(void)k;
	(void)row;
	(*(long *)arg)++;
}

/* Journals n entries of log "io0" and leaves them unreleased in one file, whose path
 * goes to path; bounds[i] is the file offset where entry i ends (bounds[0]: header). */
static int make_segment(int n, size_t *bounds, char *path, size_t cap)
{
	unsigned char tmp[JOURNAL_ENTRY_MAX];
	struct journal_log *l;
	struct acct_row row;
	struct journal *j;
	char err[256], name[256];
	int i;

	if (!(j = journal_open(tmpdir_path, 3600, err, sizeof(err))))
		return -1;
	l = journal_log_open(j, "io0");
	bounds[0] = 8;
	for (i = 0; i < n; i++) {
		row_fill(&row, "io0", i);
		journal_append(l, JOURNAL_DECISION, &row);
		bounds[i + 1] = bounds[i] + journal_entry_encode(JOURNAL_DECISION, &row, tmp, sizeof(tmp));
	}
	journal_log_close(l);
	journal_close(j);
	if (seg_name(name, sizeof(name)) < 0)
		return -1;
	snprintf(path, cap, "%s/%s", tmpdir_path, name);
	return 0;
}

/* Replays the directory: returns the entries, *damaged the damaged files. */
static long replay_dir(int *damaged)
{
	struct journal *j;
	char err[256];
	long n = 0, rc;

	if (!(j = journal_open(tmpdir_path, 3600, err, sizeof(err))))
		return -2;
	rc = journal_replay(j, count_cb, &n);
	*damaged = journal_replay_damaged(j);
	journal_close(j);
	return rc < 0 ? rc : n;
}

static void test_torn_tail(void)
{
	size_t bounds[11], size, len;
	unsigned char *orig;
	char path[512];
	int damaged = 0;

	if (tmpdir_make("journal") < 0 || make_segment(10, bounds, path, sizeof(path)) < 0) {
		CHECK(0);
		goto out;
	}
	orig = file_get(path, &size);
	CHECK_EQ_INT(size, bounds[10]);
	/* Cut at every length: whole entries come back, a cut one marks the file. */
	for (len = 0; len <= size; len++) {
		long want = 0;
		int at_bound = len == 0;

		for (int i = 0; i <= 10; i++) {
			if (bounds[i] <= len && i > 0)
				want++;
			at_bound |= bounds[i] == len;
		}
		CHECK(file_put(path, orig, len) == 0);
		CHECK_EQ_INT(replay_dir(&damaged), want);
		CHECK_EQ_INT(damaged, !at_bound);
	}
	free(orig);
out:
	tmpdir_remove();
}

static void test_corrupt(void)
{
	size_t bounds[4], size, good;
	unsigned char *orig;
	enum journal_end end;
	char path[512];
	long n = 0;
	int damaged = 0;
	uint64_t errs = stats_get(&stats.errors[STATS_ERR_JOURNAL]);

	if (tmpdir_make("journal") < 0 || make_segment(3, bounds, path, sizeof(path)) < 0) {
		CHECK(0);
		goto out;
	}
	orig = file_get(path, &size);
	CHECK_EQ_INT(journal_segment_replay(orig, size, count_cb, &n, &end, &good), 3);
	CHECK_EQ_INT(end, JOURNAL_END_CLEAN);
	CHECK_EQ_INT(good, size);

	/* The second entry's payload damaged: the first survives, the file is counted. */
	orig[bounds[1] + 20] ^= 1;
	CHECK(file_put(path, orig, size) == 0);
	CHECK_EQ_INT(replay_dir(&damaged), 1);
	CHECK_EQ_INT(damaged, 1);
	CHECK_EQ_INT(journal_segment_replay(orig, size, count_cb, &n, &end, &good), 1);
	CHECK_EQ_INT(end, JOURNAL_END_CORRUPT);
	CHECK_EQ_INT(good, bounds[1]);
	orig[bounds[1] + 20] ^= 1;

	CHECK_EQ_INT(journal_segment_replay(orig, bounds[2] + 3, count_cb, &n, &end, &good), 2);
	CHECK_EQ_INT(end, JOURNAL_END_TORN);

	/* Another format version, or not a segment at all. */
	orig[4] = 2;
	CHECK_EQ_INT(journal_segment_replay(orig, size, count_cb, &n, &end, &good), 0);
	CHECK_EQ_INT(end, JOURNAL_END_HEADER);
	CHECK(file_put(path, orig, size) == 0);
	CHECK(file_put(tmpdir_file("zz.j"), "hello", 5) == 0);
	CHECK_EQ_INT(replay_dir(&damaged), 0);
	CHECK_EQ_INT(damaged, 2);
	CHECK(stats_get(&stats.errors[STATS_ERR_JOURNAL]) >= errs + 3);
	free(orig);
out:
	tmpdir_remove();
}

static uint32_t append_one(struct journal_log *l, int seq, int flush)
{
	struct acct_row row;
	uint32_t e;

	row_fill(&row, "io0", seq);
	e = journal_append(l, JOURNAL_DECISION, &row);
	if (flush)
		CHECK_EQ_INT(journal_flush(l), 0);
	return e;
}

static void test_tick_release(void)
{
	uint64_t errs = stats_get(&stats.errors[STATS_ERR_JOURNAL]);
	struct journal_log *l;
	struct journal *j;
	uint32_t e1, e2, e5;
	char err[256];

	if (tmpdir_make("journal") < 0 || !(j = journal_open(tmpdir_path, 0, err, sizeof(err)))) {
		CHECK(0);
		goto out;
	}
	l = journal_log_open(j, "io0");
	e1 = append_one(l, 1, 1);
	CHECK_EQ_INT(e1, 1);
	journal_tick(j);
	e2 = append_one(l, 2, 1);
	CHECK_EQ_INT(e2, 2);
	journal_tick(j);                       /* epoch 3 */
	CHECK_EQ_INT(epoch_files(1, "io0") + epoch_files(2, "io0"), 2);

	/* Released out of order: each epoch goes as soon as it is empty. */
	journal_release(j, e2);
	CHECK_EQ_INT(epoch_files(2, "io0"), 1);   /* not before the tick */
	journal_tick(j);                       /* epoch 4 */
	CHECK_EQ_INT(epoch_files(2, "io0"), 0);
	CHECK_EQ_INT(epoch_files(1, "io0"), 1);
	journal_release(j, e1);
	journal_tick(j);                       /* epoch 5 */
	CHECK_EQ_INT(epoch_files(1, "io0"), 0);

	/* Released while still buffered: the buffer keeps its epoch alive until written. */
	e5 = append_one(l, 5, 0);
	CHECK_EQ_INT(e5, 5);
	journal_release(j, e5);
	journal_tick(j);                       /* epoch 6 */
	journal_tick(j);                       /* epoch 7, and a look at epoch 5 */
	CHECK_EQ_INT(journal_flush(l), 0);
	CHECK_EQ_INT(epoch_files(5, "io0"), 1);
	journal_tick(j);
	CHECK_EQ_INT(epoch_files(5, "io0"), 0);
	journal_release(j, 0);
	journal_log_close(l);
	journal_close(j);
	CHECK_EQ_INT(seg_count(NULL), 0);

	/* The current epoch's files stay, however released, until it ends or the close. */
	if (!(j = journal_open(tmpdir_path, 3600, err, sizeof(err)))) {
		CHECK(0);
		goto out;
	}
	l = journal_log_open(j, "io0");
	journal_release(j, append_one(l, 1, 1));
	journal_tick(j);
	journal_tick(j);
	CHECK_EQ_INT(epoch_files(1, "io0"), 1);
	CHECK_EQ_INT(append_one(l, 2, 1), 1);
	journal_log_close(l);
	journal_close(j);
	CHECK_EQ_INT(epoch_files(1, "io0"), 1);   /* one entry unreleased: kept */
	CHECK_EQ_INT(stats_get(&stats.errors[STATS_ERR_JOURNAL]), errs);
out:
	tmpdir_remove();
}

static void test_ring_full(void)
{
	struct journal_log *l;
	struct journal *j;
	uint32_t e1, e;
	char err[256];
	int i;

	if (tmpdir_make("journal") < 0 || !(j = journal_open(tmpdir_path, 0, err, sizeof(err)))) {
		CHECK(0);
		goto out;
	}
	l = journal_log_open(j, "io0");
	e1 = append_one(l, 1, 1);
	for (i = 0; i < JOURNAL_EPOCHS + 10; i++)
		journal_tick(j);
	/* Epoch 1 holds its slot: the epoch stops just short of reusing it. */
	e = append_one(l, 2, 1);
	CHECK_EQ_INT(e, JOURNAL_EPOCHS);
	journal_release(j, e);
	journal_release(j, e1);
	journal_tick(j);
	CHECK_EQ_INT(epoch_files(1, "io0"), 0);
	e = append_one(l, 3, 1);
	CHECK_EQ_INT(e, JOURNAL_EPOCHS + 1);
	journal_tick(j);
	CHECK_EQ_INT(epoch_files(JOURNAL_EPOCHS, "io0"), 0);
	journal_release(j, e);
	journal_log_close(l);
	journal_close(j);
	CHECK_EQ_INT(seg_count(NULL), 0);
out:
	tmpdir_remove();
}

/* ---- concurrency ---- */

#define CONC_ENTRIES 20000
#define CONC_QUEUE (2 * CONC_ENTRIES)

struct conc {
	struct journal *j;
	char runid[256];
	pthread_mutex_t lock;
	uint32_t q_epoch[CONC_QUEUE];
	int q_log[CONC_QUEUE];
	int q_head, q_tail;              /* under lock */
	int producers_done;              /* under lock */
	int missing_files, backwards;    /* written by one thread each, read after join */
	long released;
};

struct producer {
	struct conc *c;
	int idx;
};

static void *conc_produce(void *arg)
{
	struct producer *p = arg;
	struct conc *c = p->c;
	struct journal_log *l = journal_log_open(c->j, log_names[p->idx]);
	uint32_t pending[16], last = 0;
	int i, n = 0;

	for (i = 0; i < CONC_ENTRIES; i++) {
		struct acct_row row;

		row_fill(&row, log_names[p->idx], i);
		pending[n] = journal_append(l, JOURNAL_DECISION, &row);
		if (pending[n] < last)
			c->backwards++;
		last = pending[n++];
		/* Batches of 1 to 16, like NOTIFYs between two reads. */
		if (n == 16 || (i * 7 + p->idx) % 11 == 0 || i == CONC_ENTRIES - 1) {
			journal_flush(l);
			pthread_mutex_lock(&c->lock);
			for (int k = 0; k < n; k++) {
				c->q_epoch[c->q_tail] = pending[k];
				c->q_log[c->q_tail++] = p->idx;
			}
			pthread_mutex_unlock(&c->lock);
			n = 0;
		}
	}
	journal_log_close(l);
	pthread_mutex_lock(&c->lock);
	c->producers_done++;
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* Releases what the producers flushed, checking first that its file still exists:
 * a file deleted under an unreleased entry would be lost on a crash. */
static void *conc_release(void *arg)
{
	struct conc *c = arg;

	for (;;) {
		uint32_t e = 0;
		int li = 0, done;
		char path[512];

		pthread_mutex_lock(&c->lock);
		done = c->producers_done == 2 && c->q_head == c->q_tail;
		if (c->q_head < c->q_tail) {
			e = c->q_epoch[c->q_head];
			li = c->q_log[c->q_head++];
		}
		pthread_mutex_unlock(&c->lock);
		if (done)
			return NULL;
		if (!e) {
			usleep(50);
			continue;
		}
		snprintf(path, sizeof(path), "%s/%s-%010" PRIu32 "-%s.j", tmpdir_path, c->runid, e,
		         log_names[li]);
		if (access(path, F_OK) != 0)
			c->missing_files++;
		journal_release(c->j, e);
		c->released++;
	}
}

static void test_concurrent(void)
{
	uint64_t errs = stats_get(&stats.errors[STATS_ERR_JOURNAL]);
	static struct conc c;
	struct producer p[2];
	pthread_t th[3];
	struct journal_log *l;
	char err[256], name[256];
	uint32_t e;
	int i, done;

	memset(&c, 0, sizeof(c));
	pthread_mutex_init(&c.lock, NULL);
	if (tmpdir_make("journal") < 0 || !(c.j = journal_open(tmpdir_path, 0, err, sizeof(err)))) {
		CHECK(0);
		goto out;
	}
	/* Learn the run id from a first file. */
	l = journal_log_open(c.j, "probe");
	e = append_one(l, 0, 1);
	journal_log_close(l);
	CHECK(seg_name(name, sizeof(name)) == 0);
	*strstr(name, "-0000000001-probe.j") = '\0';
	snprintf(c.runid, sizeof(c.runid), "%s", name);
	journal_release(c.j, e);

	for (i = 0; i < 2; i++) {
		p[i].c = &c;
		p[i].idx = i;
		pthread_create(&th[i], NULL, conc_produce, &p[i]);
	}
	pthread_create(&th[2], NULL, conc_release, &c);
	do {
		journal_tick(c.j);
		usleep(300);
		pthread_mutex_lock(&c.lock);
		done = c.producers_done == 2 && c.q_head == c.q_tail;
		pthread_mutex_unlock(&c.lock);
	} while (!done);
	for (i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	CHECK_EQ_INT(c.released, 2 * CONC_ENTRIES);
	CHECK_EQ_INT(c.missing_files, 0);
	CHECK_EQ_INT(c.backwards, 0);
	/* Everything released: after a tick only the current epoch may have files. */
	journal_tick(c.j);
	l = journal_log_open(c.j, "probe");
	e = append_one(l, 1, 0);
	snprintf(name, sizeof(name), "-%010" PRIu32 "-", e);
	CHECK(e > 2);
	CHECK_EQ_INT(seg_count(NULL) - seg_count(name), 0);
	journal_release(c.j, e);
	journal_log_close(l);
	journal_close(c.j);
	CHECK_EQ_INT(seg_count(NULL), 0);
	CHECK_EQ_INT(stats_get(&stats.errors[STATS_ERR_JOURNAL]), errs);
out:
	pthread_mutex_destroy(&c.lock);
	tmpdir_remove();
}

static void test_open_and_names(void)
{
	struct journal_log *a, *b;
	struct journal *j, *j2;
	char err[256];
	int damaged = 0;

	if (tmpdir_make("journal") < 0 || !(j = journal_open(tmpdir_path, 60, err, sizeof(err)))) {
		CHECK(0);
		goto out;
	}
	j2 = journal_open(tmpdir_path, 60, err, sizeof(err));
	CHECK(j2 == NULL);
	CHECK(strstr(err, "in use") != NULL);
	CHECK(journal_open(tmpdir_path, -1, err, sizeof(err)) == NULL);
	CHECK(journal_log_open(j, "") == NULL);
	CHECK(journal_log_open(j, "a/b") == NULL);
	CHECK(journal_log_open(j, "abcdefghijklmnopq") == NULL);
	a = journal_log_open(j, "io_0");
	CHECK(a != NULL);
	CHECK(journal_log_open(j, "io_0") == NULL);
	/* Reopened within the epoch, a log appends to its file without a second header. */
	append_one(a, 1, 1);
	journal_log_close(a);
	b = journal_log_open(j, "io_0");
	CHECK(b != NULL);
	append_one(b, 2, 1);
	journal_log_close(b);
	journal_close(j);
	CHECK_EQ_INT(replay_dir(&damaged), 2);
	CHECK_EQ_INT(damaged, 0);
out:
	tmpdir_remove();
}

/* The directory disappears under a running agent: flushes fail, are counted, and
 * nothing else breaks. */
static void test_write_error(void)
{
	uint64_t errs = stats_get(&stats.errors[STATS_ERR_JOURNAL]);
	struct journal_log *l;
	struct journal *j;
	char err[256];
	uint32_t e1, e2;

	if (tmpdir_make("journal") < 0 || !(j = journal_open(tmpdir_path, 0, err, sizeof(err)))) {
		CHECK(0);
		return;
	}
	l = journal_log_open(j, "io0");
	tmpdir_remove();
	e1 = append_one(l, 1, 0);
	CHECK_EQ_INT(journal_flush(l), -1);
	e2 = append_one(l, 2, 0);
	CHECK_EQ_INT(journal_flush(l), -1);
	CHECK_EQ_INT(e1, 1);
	CHECK_EQ_INT(e2, 1);
	CHECK_EQ_INT(stats_get(&stats.errors[STATS_ERR_JOURNAL]), errs + 2);
	journal_release(j, e1);
	journal_release(j, e2);
	journal_tick(j);
	journal_log_close(l);
	journal_close(j);
}

int main(void)
{
	log_set_level(LOG_ERROR);
	RUN(test_roundtrip);
	RUN(test_decode_format);
	RUN(test_crash_replay);
	RUN(test_torn_tail);
	RUN(test_corrupt);
	RUN(test_tick_release);
	RUN(test_ring_full);
	RUN(test_concurrent);
	RUN(test_open_and_names);
	RUN(test_write_error);
	return UNIT_DONE();
}
