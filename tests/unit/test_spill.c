/* Unit tests of spill: rows come back in the order pushed with every field and their
 * journal epochs, a partial read is read again until advanced, the byte bound refuses
 * rows, the file is truncated once drained, reopening empties it, and the gauges follow. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "spill.h"
#include "stats.h"
#include "tmpdir.h"
#include "unit.h"

/* Every field set, each to a value of its own (distinct per seq). */
static void row_fill(struct acct_row *r, int seq)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->request_id, sizeof(r->request_id), "req-%06d", seq);
	r->key_id = seq % 5 ? seq : ACCT_NONE;
	snprintf(r->model, sizeof(r->model), "model-%d", seq);
	snprintf(r->model_requested, sizeof(r->model_requested), "asked-%d", seq);
	snprintf(r->provider, sizeof(r->provider), "prov-%d", seq % 3);
	snprintf(r->verdict, sizeof(r->verdict), "allow");
	snprintf(r->termination, sizeof(r->termination), "CD");
	r->status = 200 + seq % 300;
	r->stream = seq % 3 - 1;
	r->prompt_tokens = 1000 + seq;
	r->completion_tokens = 2000 + seq;
	r->cached_tokens = 3 + seq;
	r->cache_creation_tokens = 4 + seq;
	r->reasoning_tokens = 5 + seq;
	r->cache_creation_1h_tokens = 6 + seq;
	r->audio_input_tokens = 7 + seq;
	r->audio_output_tokens = 8 + seq;
	r->accepted_prediction_tokens = 9 + seq;
	r->rejected_prediction_tokens = 10 + seq;
	r->web_search_calls = 11 + seq;
	snprintf(r->service_tier, sizeof(r->service_tier), "flex");
	r->cost_micros = seq * 13;
	r->unpriced = seq & 1;
	r->outcome = (enum acct_outcome)(seq % ACCT_OUTCOME_COUNT);
	r->usage_source = (enum acct_usage_source)(seq % ACCT_USAGE_SOURCE_COUNT);
	r->started_at_ms = 1733000000000 + seq;
	r->duration_ms = 12 + seq;
	r->ttfb_ms = 13 + seq;
	r->bytes_in = 14 + seq;
	r->bytes_out = 15 + seq;
	r->estimated_tokens = 16 + seq;
	r->estimated_cost_micros = 17 + seq;
	r->est_prompt_tokens = 18 + seq;
	r->est_completion_tokens = 19 + seq;
	r->journal_epoch[0] = (uint32_t)seq + 1;
	r->journal_epoch[1] = (uint32_t)seq + 70000;
	r->flags = seq & 7;
	snprintf(r->response_id, sizeof(r->response_id), "resp_%d", seq);
}

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
	CHECK_EQ_INT(a->cache_creation_1h_tokens, b->cache_creation_1h_tokens);
	CHECK_EQ_INT(a->audio_input_tokens, b->audio_input_tokens);
	CHECK_EQ_INT(a->audio_output_tokens, b->audio_output_tokens);
	CHECK_EQ_INT(a->accepted_prediction_tokens, b->accepted_prediction_tokens);
	CHECK_EQ_INT(a->rejected_prediction_tokens, b->rejected_prediction_tokens);
	CHECK_EQ_INT(a->web_search_calls, b->web_search_calls);
	CHECK_EQ_STR(a->service_tier, b->service_tier);
	CHECK_EQ_INT(a->cost_micros, b->cost_micros);
	CHECK_EQ_INT(a->unpriced, b->unpriced);
	CHECK_EQ_INT(a->outcome, b->outcome);
	CHECK_EQ_INT(a->usage_source, b->usage_source);
	CHECK_EQ_INT(a->started_at_ms, b->started_at_ms);
	CHECK_EQ_INT(a->duration_ms, b->duration_ms);
	CHECK_EQ_INT(a->ttfb_ms, b->ttfb_ms);
	CHECK_EQ_INT(a->bytes_in, b->bytes_in);
	CHECK_EQ_INT(a->bytes_out, b->bytes_out);
	CHECK_EQ_INT(a->estimated_tokens, b->estimated_tokens);
	CHECK_EQ_INT(a->estimated_cost_micros, b->estimated_cost_micros);
	CHECK_EQ_INT(a->est_prompt_tokens, b->est_prompt_tokens);
	CHECK_EQ_INT(a->est_completion_tokens, b->est_completion_tokens);
	CHECK_EQ_INT(a->journal_epoch[0], b->journal_epoch[0]);
	CHECK_EQ_INT(a->journal_epoch[1], b->journal_epoch[1]);
	CHECK_EQ_INT(a->flags, b->flags);
	CHECK_EQ_STR(a->response_id, b->response_id);
	return unit_failed_checks == before;
}

static long file_size(void)
{
	struct stat st;

	return stat(tmpdir_file("spill"), &st) == 0 ? (long)st.st_size : -1;
}

static struct spill *open_spill(int64_t max_bytes)
{
	char err[256] = "";
	struct spill *s = spill_open(tmpdir_path, max_bytes, err, sizeof(err));

	CHECK(s != NULL);
	if (!s)
		fprintf(stderr, "%s\n", err);
	return s;
}

/* Rows come back oldest first, every field and both epochs; a read does not remove. */
static void test_order_and_fields(void)
{
	static struct acct_row in[1000], out[1000];
	struct spill *s = open_spill(64 << 20);
	size_t i, n, got = 0;

	if (!s)
		return;
	for (i = 0; i < 1000; i++) {
		row_fill(&in[i], (int)i);
		CHECK_EQ_INT(spill_push(s, &in[i]), 0);
	}
	CHECK_EQ_INT(spill_rows(s), 1000);
	CHECK_EQ_INT(atomic_load(&stats.spilled_rows), 1000);
	CHECK(atomic_load(&stats.spill_head_ms) > 0);
	/* Not advanced: the same rows again. */
	CHECK_EQ_INT(spill_read(s, out, 3), 3);
	CHECK_EQ_INT(spill_read(s, out, 3), 3);
	row_check_eq(&in[0], &out[0]);
	CHECK_EQ_INT(spill_rows(s), 1000);
	/* Batches of 300 (the last one short), each advanced. */
	while ((n = spill_read(s, out + got, 300)) > 0) {
		spill_advance(s);
		got += n;
	}
	CHECK_EQ_INT(got, 1000);
	for (i = 0; i < 1000; i++)
		if (!row_check_eq(&in[i], &out[i]))
			break;
	CHECK_EQ_INT(spill_rows(s), 0);
	CHECK_EQ_INT(file_size(), 0);   /* drained: truncated */
	CHECK_EQ_INT(atomic_load(&stats.spilled_rows), 0);
	CHECK_EQ_INT(atomic_load(&stats.spill_head_ms), 0);
	/* Pushing after a drain starts the file over. */
	CHECK_EQ_INT(spill_push(s, &in[7]), 0);
	CHECK_EQ_INT(spill_read(s, out, 10), 1);
	row_check_eq(&in[7], &out[0]);
	spill_close(s);
}

/* Pushes and reads interleaved keep the order across truncations. */
static void test_interleaved(void)
{
	struct acct_row in, out[8];
	struct spill *s = open_spill(1 << 20);
	int next_in = 0, next_out = 0, round, k;
	size_t n, i;

	if (!s)
		return;
	for (round = 0; round < 50; round++) {
		for (k = 0; k < round % 7 + 1; k++) {
			row_fill(&in, next_in++);
			CHECK_EQ_INT(spill_push(s, &in), 0);
		}
		n = spill_read(s, out, (size_t)(round % 5 + 1));
		for (i = 0; i < n; i++) {
			row_fill(&in, next_out++);
			row_check_eq(&in, &out[i]);
		}
		spill_advance(s);
	}
	CHECK_EQ_INT(spill_rows(s), (size_t)(next_in - next_out));
	spill_close(s);
}

/* The bound counts bytes since the file was last empty: full, it refuses; drained, it
 * takes rows again. */
static void test_bound(void)
{
	struct acct_row in, out[64];
	struct spill *s = open_spill(4096);
	int pushed = 0;

	if (!s)
		return;
	row_fill(&in, 1);
	while (pushed < 1000 && spill_push(s, &in) == 0)
		pushed++;
	CHECK(pushed > 0 && pushed < 1000);
	CHECK(file_size() <= 4096);
	CHECK_EQ_INT(spill_rows(s), pushed);
	CHECK_EQ_INT(spill_push(s, &in), -1);
	/* Half read: the bytes are still the file's, still full. */
	CHECK_EQ_INT(spill_read(s, out, (size_t)pushed / 2), pushed / 2);
	spill_advance(s);
	CHECK_EQ_INT(spill_push(s, &in), -1);
	CHECK_EQ_INT(spill_read(s, out, 64), pushed - pushed / 2);
	spill_advance(s);
	CHECK_EQ_INT(spill_push(s, &in), 0);
	spill_close(s);

	/* 0: nothing waits. */
	s = open_spill(0);
	if (s) {
		CHECK_EQ_INT(spill_push(s, &in), -1);
		CHECK_EQ_INT(spill_rows(s), 0);
		spill_close(s);
	}
}

/* A reopened spill is empty: the journal, not the file, brings rows back after a
 * restart. */
static void test_reopen_discards(void)
{
	struct acct_row in, out[4];
	struct spill *s = open_spill(1 << 20);

	if (!s)
		return;
	row_fill(&in, 3);
	CHECK_EQ_INT(spill_push(s, &in), 0);
	CHECK_EQ_INT(spill_push(s, &in), 0);
	spill_close(s);
	CHECK(file_size() > 0);
	s = open_spill(1 << 20);
	if (!s)
		return;
	CHECK_EQ_INT(file_size(), 0);
	CHECK_EQ_INT(spill_rows(s), 0);
	CHECK_EQ_INT(spill_read(s, out, 4), 0);
	CHECK_EQ_INT(atomic_load(&stats.spilled_rows), 0);
	spill_close(s);
}

/* A damaged file is given up whole: read nothing, hold nothing, take rows again. */
static void test_damaged(void)
{
	struct acct_row in, out[4];
	struct spill *s = open_spill(1 << 20);
	FILE *f;

	if (!s)
		return;
	row_fill(&in, 4);
	CHECK_EQ_INT(spill_push(s, &in), 0);
	CHECK_EQ_INT(spill_push(s, &in), 0);
	f = fopen(tmpdir_file("spill"), "r+");
	CHECK(f != NULL);
	if (f) {
		fseek(f, 30, SEEK_SET);   /* inside the first entry's payload */
		fputc('~', f);
		fclose(f);
	}
	CHECK_EQ_INT(spill_read(s, out, 4), 0);
	CHECK_EQ_INT(spill_rows(s), 0);
	CHECK_EQ_INT(file_size(), 0);
	CHECK(atomic_load(&stats.errors[STATS_ERR_JOURNAL]) > 0);
	CHECK_EQ_INT(spill_push(s, &in), 0);
	CHECK_EQ_INT(spill_read(s, out, 4), 1);
	row_check_eq(&in, &out[0]);
	spill_close(s);
}

/* A row the journal's codec refuses (an enum out of range) is refused here too. */
static void test_unencodable(void)
{
	struct acct_row in;
	struct spill *s = open_spill(1 << 20);

	if (!s)
		return;
	row_fill(&in, 2);
	in.outcome = ACCT_OUTCOME_COUNT;
	CHECK_EQ_INT(spill_push(s, &in), -1);
	CHECK_EQ_INT(spill_rows(s), 0);
	spill_close(s);
}

int main(void)
{
	if (tmpdir_make("spill") < 0)
		return 1;
	RUN(test_order_and_fields);
	RUN(test_interleaved);
	RUN(test_bound);
	RUN(test_reopen_discards);
	RUN(test_damaged);
	RUN(test_unencodable);
	tmpdir_remove();
	return UNIT_DONE();
}
