/* bench-journal: the journal's cost on the request path, in ns per entry: encoding
 * alone, then append + flush (one write per entry, and per batch of 16 as an I/O
 * thread does with pipelined NOTIFYs), into a temporary directory removed afterwards.
 * Single-threaded; BENCH_ENTRIES (default 100000) entries per pattern, best of 3. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "journal.h"
#include "stats.h"

#define BENCH_ROUNDS 3

static void bench_row(struct acct_row *r)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->request_id, sizeof(r->request_id), "6f1c2d4e-0b7a-4c1e-9a55-3e2b1c0d9f01");
	r->key_id = 3;
	snprintf(r->model, sizeof(r->model), "gpt-4o-mini-2024-07-18");
	snprintf(r->model_requested, sizeof(r->model_requested), "gpt-4o-mini");
	snprintf(r->provider, sizeof(r->provider), "openai");
	snprintf(r->verdict, sizeof(r->verdict), "allow");
	snprintf(r->termination, sizeof(r->termination), "--");
	r->status = 200;
	r->stream = 1;
	r->prompt_tokens = 1200;
	r->completion_tokens = 345;
	r->cached_tokens = 1024;
	r->cache_creation_tokens = ACCT_NONE;
	r->cost_micros = 987;
	r->outcome = ACCT_COMPLETE;
	r->usage_source = ACCT_USAGE_STREAM;
	r->started_at_ms = 1733000000123;
	r->duration_ms = 2345;
	r->ttfb_ms = 180;
	r->bytes_in = 1500;
	r->bytes_out = 40000;
}

static double bench_encode(const struct acct_row *row, long n)
{
	unsigned char buf[JOURNAL_ENTRY_MAX];
	volatile size_t sink = 0;
	uint64_t t0 = stats_now_ns();
	long i;

	for (i = 0; i < n; i++)
		sink += journal_entry_encode(JOURNAL_ROW, row, buf, sizeof(buf));
	(void)sink;
	return (double)(stats_now_ns() - t0) / (double)n;
}

/* ns per entry appending n entries with a flush every batch entries. -1 on error. */
static double bench_append(struct journal *j, const struct acct_row *row, long n, int batch)
{
	struct journal_log *l = journal_log_open(j, "bench");
	uint64_t t0;
	double ns;
	long i;

	if (!l)
		return -1;
	t0 = stats_now_ns();
	for (i = 0; i < n; i++) {
		journal_release(j, journal_append(l, JOURNAL_ROW, row));
		if ((i + 1) % batch == 0 && journal_flush(l) < 0)
			break;
	}
	ns = (double)(stats_now_ns() - t0) / (double)n;
	journal_log_close(l);
	journal_tick(j);   /* all released: the files of past epochs go */
	return i == n ? ns : -1;
}

int main(void)
{
	const char *env = getenv("BENCH_ENTRIES");
	long n = env ? atol(env) : 100000;
	char dir[] = "/tmp/tally-bench-journal-XXXXXX", err[256], lock[64];
	double enc = 1e18, one = 1e18, sixteen = 1e18;
	unsigned char buf[JOURNAL_ENTRY_MAX];
	struct acct_row row;
	struct journal *j;
	int r, rc = 1;

	if (n <= 0 || !mkdtemp(dir)) {
		fprintf(stderr, "bench-journal: bad BENCH_ENTRIES or no temporary directory\n");
		return 1;
	}
	/* 0-second epochs: each round rotates, so files are deleted as in production. */
	if (!(j = journal_open(dir, 0, err, sizeof(err)))) {
		fprintf(stderr, "bench-journal: %s\n", err);
		goto out;
	}
	bench_row(&row);
	for (r = 0; r < BENCH_ROUNDS; r++) {
		double e = bench_encode(&row, n), a = bench_append(j, &row, n, 1);
		double b = bench_append(j, &row, n, 16);

		if (a < 0 || b < 0) {
			fprintf(stderr, "bench-journal: journal writes failed\n");
			goto close;
		}
		enc = e < enc ? e : enc;
		one = a < one ? a : one;
		sixteen = b < sixteen ? b : sixteen;
	}
	printf("entry size (typical row): %zu bytes\n",
	       journal_entry_encode(JOURNAL_ROW, &row, buf, sizeof(buf)));
	printf("encode only:               %7.0f ns/entry\n", enc);
	printf("append + flush each:       %7.0f ns/entry\n", one);
	printf("append, flush per 16:      %7.0f ns/entry\n", sixteen);
	rc = 0;
close:
	journal_close(j);
out:
	snprintf(lock, sizeof(lock), "%s/lock", dir);
	unlink(lock);
	rmdir(dir);
	return rc;
}
