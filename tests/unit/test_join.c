/* Unit tests of join: the pending row a decision leaves, the row of a record with and
 * without it, the expired row, every outcome and usage source, what a record may not
 * change, what is estimated, what settles a hold, and each arrival's fate in the
 * counters. Records are parsed from lines in the log-format's shape by the real parser. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "acct.h"
#include "counters.h"
#include "decision.h"
#include "dedupe.h"
#include "fixture.h"
#include "join.h"
#include "luacap.h"
#include "pending.h"
#include "price.h"
#include "record.h"
#include "unit.h"

static struct fixture fx;

#define ID "1796278643040-1A2B-0001-00000000CAFE0001"

/* A record: fields after the id as the log-format writes them (see tally.cfg). */
static struct record rec;
static char rec_line[16384];

static int rec_parse(const char *id, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static int rec_parse(const char *id, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(rec_line, sizeof(rec_line), "tally2 - 4e3c1d2a-9f6b-4c1e-8a7d-2b5f0e9c1a37"
	                 " - %s ", id);

	va_start(ap, fmt);
	vsnprintf(rec_line + n, sizeof(rec_line) - (size_t)n, fmt, ap);
	va_end(ap);
	return record_parse(rec_line, strlen(rec_line), &rec);
}

/* Status, bytes in, termination; then verdict, key, model, provider, stream, skipped,
 * spoe error; the json_query usage (model, 8 counts); the capture. */
#define REC(status, bytes_in, term, agent, usage) \
	"1796278643 040 " status " " bytes_in " 555 3 0 0 2 5 " term " be_x " agent " " usage " %s"

/* The capture field of a body of kind ('s': an event stream, else not), as the
 * capture filter (haproxy/capture.lua, under an embedded Lua) publishes it. */
static const char *cap(char kind, const char *text)
{
	static char buf[8192];
	int64_t ws;

	if (luacap_read(text, strlen(text), 0, kind == 's', 0, buf, sizeof(buf), &ws) < 0)
		snprintf(buf, sizeof(buf), "-");
	return buf;
}

#define AGENT_ALLOW_OPEN  "allow 1 gpt-a oai 0 - -"
#define NO_AGENT          "- - - - - - -"
#define NO_USAGE          "- - - - - - - - -"

/* The decision on a POST to path with a Content-Length, its estimate made. */
static struct decision decide_on(const char *path, const char *key, const char *body)
{
	struct decision_request req;
	struct decision d;
	static char auth[128];

	memset(&req, 0, sizeof(req));
	snprintf(auth, sizeof(auth), "Bearer %s", key);
	req.authorization = (struct spop_str){ auth, strlen(auth) };
	req.method = (struct spop_str){ "POST", 4 };
	req.path = (struct spop_str){ path, strlen(path) };
	req.body = (struct spop_str){ body, strlen(body) };
	req.body_length_known = 1;
	req.body_size = (int64_t)strlen(body);
	decision_make(fx.kt, &req, &d);
	if (d.verdict == DECISION_ALLOW)
		decision_estimate(&d, &req, 4096);
	return d;
}

static struct acct_row pending_of(const char *key, const char *body)
{
	struct decision d = decide_on("/v1/chat/completions", key, body);
	struct acct_row row;

	join_decided(&d, ID, strlen(ID), 1796278643000, &row);
	return row;
}

/* The pending row of body's first bytes, HAProxy's cut of a 40000-byte body. */
static struct acct_row pending_of_cut(const char *key, const char *body)
{
	struct decision_request req;
	struct decision d;
	struct acct_row row;
	static char auth[128];

	memset(&req, 0, sizeof(req));
	snprintf(auth, sizeof(auth), "Bearer %s", key);
	req.authorization = (struct spop_str){ auth, strlen(auth) };
	req.method = (struct spop_str){ "POST", 4 };
	req.path = (struct spop_str){ "/v1/chat/completions", 20 };
	req.body = (struct spop_str){ body, strlen(body) };
	req.body_length_known = 1;
	req.body_size = 40000;
	decision_make(fx.kt, &req, &d);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	decision_estimate(&d, &req, 4096);
	join_decided(&d, ID, strlen(ID), 1796278643000, &row);
	return row;
}

static void test_decided(void)
{
	/* 40 bytes: 10 prompt tokens estimated, and its max_tokens */
	const char *body = "{\"model\":\"gpt-a\",\"max_tokens\":100,\"x\":1}";
	struct acct_row p = pending_of(FIX_KEY_OPEN, body);

	CHECK_EQ_STR(p.request_id, ID);
	CHECK_EQ_INT(p.key_id, 1);
	CHECK_EQ_STR(p.model_requested, "gpt-a");
	CHECK_EQ_STR(p.provider, "oai");
	CHECK_EQ_STR(p.verdict, "allow");
	CHECK_EQ_INT(p.stream, 0);
	CHECK_EQ_INT(p.est_prompt_tokens, 10);
	CHECK_EQ_INT(p.est_completion_tokens, 100);
	CHECK_EQ_INT(p.prompt_tokens, ACCT_NONE);
	CHECK_EQ_INT(p.estimated_tokens, ACCT_NONE);
	CHECK_EQ_INT(p.started_at_ms, 1796278643000);
	/* A denial estimates nothing: nothing will reach an upstream. */
	p = pending_of("tly_" "nosuchkey0000000000000000000000000000000000", body);
	CHECK_EQ_STR(p.verdict, "invalid_api_key");
	CHECK_EQ_INT(p.key_id, ACCT_NONE);
	CHECK_EQ_INT(p.est_prompt_tokens, ACCT_NONE);
	CHECK_EQ_INT(p.status, 401);
	/* A model the gateway does not know: its row names what the client asked for. */
	p = pending_of(FIX_KEY_OPEN, "{\"model\":\"gpt-nosuch\"}");
	CHECK_EQ_STR(p.verdict, "model_not_found");
	CHECK_EQ_STR(p.model_requested, "gpt-nosuch");
	CHECK_EQ_STR(p.provider, "");
}

static void test_complete_with_usage(void)
{
	struct acct_row p = pending_of(FIX_KEY_OPEN, "{\"model\":\"gpt-a\"}"), row;

	CHECK_EQ_INT(rec_parse(ID, REC("200", "342", "--", AGENT_ALLOW_OPEN,
	                               "gpt-a-2025-01-31 1000000 500000 200000 - - - - -"), "-"), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.outcome, ACCT_COMPLETE);
	CHECK_EQ_INT(row.usage_source, ACCT_USAGE_RESPONSE);
	CHECK_EQ_INT(row.prompt_tokens, 1000000);
	CHECK_EQ_INT(row.completion_tokens, 500000);
	/* The upstream's dated snapshot of the routed model, priced by the routed model's
	 * card (it has none of its own); the cached tokens, which that card does not price,
	 * at its dearest rate: 800000 x 100 + 200000 x 200 + 500000 x 200 per Mtok. */
	CHECK_EQ_STR(row.model, "gpt-a-2025-01-31");
	CHECK_EQ_STR(row.model_reported, "");
	CHECK_EQ_INT(row.unpriced, 0);
	CHECK_EQ_INT(row.cost_micros, 80 + 40 + 100);
	CHECK_EQ_INT(row.priced_fallback, 1u << PRICE_CACHED);
	CHECK_EQ_INT(row.estimated_tokens, ACCT_NONE);
	CHECK_EQ_INT(row.started_at_ms, 1796278643040);
	CHECK_EQ_INT(row.bytes_in, 342);
	CHECK_EQ_INT(row.duration_ms, 5);
	CHECK_EQ_INT(row.ttfb_ms, 2);
	CHECK_EQ_INT(rec_parse(ID, REC("200", "342", "--", AGENT_ALLOW_OPEN,
	                               "- 1000 500 - - - - - -"), "-"), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.cost_micros, (1000 * 100 + 500 * 200 + 500000) / 1000000);
	CHECK_EQ_STR(row.model, "gpt-a");
	CHECK_EQ_INT(row.priced_fallback, 0);
}

/* An answer naming another model (gpt-b, priced at 0) is priced by the routed one's
 * card; the row says the routed model, and what the answer said beside it. */
static void test_priced_by_routed_model(void)
{
	struct acct_row p = pending_of(FIX_KEY_OPEN, "{\"model\":\"gpt-a\"}"), row;

	CHECK_EQ_INT(rec_parse(ID, REC("200", "342", "--", AGENT_ALLOW_OPEN,
	                               "gpt-b 1000000 500000 - - - - - -"), "-"), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_STR(row.model, "gpt-a");
	CHECK_EQ_STR(row.model_requested, "gpt-a");
	CHECK_EQ_STR(row.model_reported, "gpt-b");
	CHECK_EQ_INT(row.cost_micros, 100 + 100);
	/* A name that merely starts like the routed one is another model too. */
	CHECK_EQ_INT(rec_parse(ID, REC("200", "342", "--", AGENT_ALLOW_OPEN,
	                               "gpt-a-mini 1000000 500000 - - - - - -"), "-"), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_STR(row.model, "gpt-a");
	CHECK_EQ_STR(row.model_reported, "gpt-a-mini");
	CHECK_EQ_INT(row.cost_micros, 200);
	/* A record no decision routed (failed open) keeps the answer's name. */
	CHECK_EQ_INT(rec_parse(ID, REC("200", "342", "--", "- - - - - 1 -",
	                               "gpt-b 1000000 500000 - - - - - -"), "-"), 0);
	join_record(&rec, ID, NULL, fx.kt, 4096, &row);
	CHECK_EQ_STR(row.model, "gpt-b");
	CHECK_EQ_STR(row.model_reported, "");
	CHECK_EQ_INT(row.cost_micros, 0);
}

static void test_model_match(void)
{
	CHECK_EQ_INT(join_model_match("gpt-4o", "gpt-4o"), JOIN_MODEL_SAME);
	CHECK_EQ_INT(join_model_match("gpt-4o", "gpt-4o-2024-08-06"), JOIN_MODEL_SNAPSHOT);
	CHECK_EQ_INT(join_model_match("claude-sonnet-4-5", "claude-sonnet-4-5-20250929"),
	             JOIN_MODEL_SNAPSHOT);
	CHECK_EQ_INT(join_model_match("claude-3-5-sonnet-latest", "claude-3-5-sonnet-20241022"),
	             JOIN_MODEL_SNAPSHOT);
	CHECK_EQ_INT(join_model_match("gpt-4o-latest", "gpt-4o-2024-11-20"), JOIN_MODEL_SNAPSHOT);
	/* Not dates, other models, a prefix of the routed name. */
	CHECK_EQ_INT(join_model_match("gpt-4o", "gpt-4o-mini"), JOIN_MODEL_OTHER);
	CHECK_EQ_INT(join_model_match("gpt-4o", "gpt-4o-mini-2024-07-18"), JOIN_MODEL_OTHER);
	CHECK_EQ_INT(join_model_match("gpt-4o", "gpt-4o-2024-13-06"), JOIN_MODEL_OTHER);
	CHECK_EQ_INT(join_model_match("gpt-4o", "gpt-4o-2024-08-00"), JOIN_MODEL_OTHER);
	CHECK_EQ_INT(join_model_match("gpt-4o", "gpt-4o-2024-08-061"), JOIN_MODEL_OTHER);
	CHECK_EQ_INT(join_model_match("gpt-4o", "gpt-4o-2024080"), JOIN_MODEL_OTHER);
	CHECK_EQ_INT(join_model_match("gpt-4o", "gpt-4o_2024-08-06"), JOIN_MODEL_OTHER);
	CHECK_EQ_INT(join_model_match("gpt-4o", "gpt-4"), JOIN_MODEL_OTHER);
	CHECK_EQ_INT(join_model_match("gpt-4o", "cheap"), JOIN_MODEL_OTHER);
	CHECK_EQ_INT(join_model_match("gpt-4o", "gpt-4o-"), JOIN_MODEL_OTHER);
	CHECK_EQ_INT(join_model_match("-latest", "-20241022"), JOIN_MODEL_OTHER);
	CHECK_EQ_INT(join_model_match("", "-2024-08-06"), JOIN_MODEL_OTHER);
}

/* What the agent decided is the pending row's, whatever the record says. */
static void test_record_cannot_change_the_decision(void)
{
	struct acct_row p = pending_of(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"stream\":true}"), row;

	CHECK_EQ_INT(rec_parse(ID, REC("200", "342", "--", "allow 4 claude-a ant 0 - -",
	                               NO_USAGE), "-"), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.key_id, 1);
	CHECK_EQ_STR(row.model_requested, "gpt-a");
	CHECK_EQ_STR(row.provider, "oai");
	CHECK_EQ_INT(row.stream, 1);
	CHECK_EQ_INT(rec_parse(ID, REC("401", "342", "--", "invalid_api_key - - - - - -",
	                               NO_USAGE), "-"), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_STR(row.verdict, "allow");
	CHECK_EQ_INT(row.outcome, ACCT_UPSTREAM_REJECTED);
}

static void test_unseen_usage_is_estimated(void)
{
	const char *body = "{\"model\":\"gpt-a\",\"stream\":true,\"max_tokens\":1000}";
	struct acct_row p = pending_of(FIX_KEY_OPEN, body), row;
	int64_t prompt = ((int64_t)strlen(body) + 3) / 4, tokens, cost;

	/* the client left before the usage event */
	CHECK_EQ_INT(rec_parse(ID, REC("200", "342", "CD", AGENT_ALLOW_OPEN, NO_USAGE),
	                       cap('s', "data: {\"model\":\"gpt-a\",\"x\":1}xxxx")), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.outcome, ACCT_CLIENT_ABORT);
	CHECK_EQ_INT(row.usage_source, ACCT_USAGE_NONE);
	CHECK_EQ_INT(row.prompt_tokens, ACCT_NONE);
	CHECK_EQ_INT(row.cost_micros, ACCT_NONE);
	CHECK_EQ_INT(row.estimated_tokens, prompt + 1000);
	CHECK_EQ_INT(row.estimated_cost_micros, (prompt * 100 + 500000) / 1000000 +
	                                        (1000 * 200 + 500000) / 1000000);
	join_charge(&row, &tokens, &cost);
	CHECK_EQ_INT(tokens, prompt + 1000);
	CHECK_EQ_INT(cost, row.estimated_cost_micros);
	/* the upstream cut it (termination S.), or the server timed out waiting (sH) */
	CHECK_EQ_INT(rec_parse(ID, REC("200", "342", "SD", AGENT_ALLOW_OPEN, NO_USAGE),
	                       "-"), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.outcome, ACCT_UPSTREAM_ERROR);
	CHECK_EQ_INT(row.estimated_tokens, prompt + 1000);
	CHECK_EQ_INT(rec_parse(ID, REC("504", "342", "sH", AGENT_ALLOW_OPEN, NO_USAGE),
	                       "-"), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.estimated_tokens, prompt + 1000);
	/* an answer whose usage json_query did not find: complete, no usage */
	CHECK_EQ_INT(rec_parse(ID, REC("200", "342", "--", AGENT_ALLOW_OPEN, NO_USAGE),
	                       "-"), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.outcome, ACCT_COMPLETE);
	CHECK_EQ_INT(row.estimated_tokens, prompt + 1000);
}

static void test_partial_usage_estimates_the_rest(void)
{
	const char *body = "{\"model\":\"claude-a\",\"stream\":true,\"max_tokens\":700}";
	struct decision d = decide_on("/v1/messages", FIX_KEY_OPEN, body);
	struct acct_row p, row;
	int64_t tokens, cost;

	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	join_decided(&d, ID, strlen(ID), 1, &p);
	CHECK_EQ_INT(rec_parse(ID, REC("200", "342", "CD", "allow 1 claude-a ant 1 - -", NO_USAGE),
	                       cap('s', "event: message_start\ndata: {\"type\":"
	                               "\"message_start\",\"message\":{\"usage\":{\"input_tokens\":"
	                               "50,\"output_tokens\":1}}}")), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.usage_source, ACCT_USAGE_PARTIAL);
	CHECK_EQ_INT(row.prompt_tokens, 50);
	CHECK_EQ_INT(row.completion_tokens, ACCT_NONE);
	CHECK_EQ_INT(row.estimated_tokens, 700);
	CHECK_EQ_INT(row.estimated_cost_micros, (700 * 400 + 500000) / 1000000);
	join_charge(&row, &tokens, &cost);
	CHECK_EQ_INT(tokens, 50 + 700);
	CHECK_EQ_INT(cost, row.cost_micros + row.estimated_cost_micros);
}

/* What the upstream answered whole, or never accepted, bills nothing. */
static void test_errors_that_bill_nothing(void)
{
	struct acct_row p = pending_of(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"stream\":true}"), row;
	int64_t tokens, cost;

	CHECK_EQ_INT(rec_parse(ID, REC("429", "342", "--", AGENT_ALLOW_OPEN, NO_USAGE),
	                       cap('j', "{\"error\":{\"x\":1}}xxx")), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.outcome, ACCT_UPSTREAM_REJECTED);
	CHECK_EQ_INT(row.estimated_tokens, ACCT_NONE);
	CHECK_EQ_INT(row.stream, 1);
	join_charge(&row, &tokens, &cost);
	CHECK_EQ_INT(tokens, ACCT_NONE);
	CHECK_EQ_INT(cost, ACCT_NONE);
	CHECK_EQ_INT(rec_parse(ID, REC("500", "342", "--", AGENT_ALLOW_OPEN, NO_USAGE),
	                       "-"), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.outcome, ACCT_UPSTREAM_ERROR);
	CHECK_EQ_INT(row.estimated_tokens, ACCT_NONE);
	/* connection refused, and a queue timeout: the request never reached it */
	CHECK_EQ_INT(rec_parse(ID, REC("503", "342", "SC", AGENT_ALLOW_OPEN, NO_USAGE),
	                       "-"), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.estimated_tokens, ACCT_NONE);
	CHECK_EQ_INT(rec_parse(ID, REC("503", "342", "sQ", AGENT_ALLOW_OPEN, NO_USAGE),
	                       "-"), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.estimated_tokens, ACCT_NONE);
}

static void test_without_pending(void)
{
	struct acct_row row;

	/* a denial HAProxy acted on */
	CHECK_EQ_INT(rec_parse(ID, REC("403", "342", "--", "model_not_allowed 2 gpt-a oai - - -",
	                               NO_USAGE), "-"), 0);
	join_record(&rec, ID, NULL, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.outcome, ACCT_DENIED);
	CHECK_EQ_INT(row.key_id, 2);
	CHECK_EQ_INT(row.team_id, ACCT_NONE);
	CHECK_EQ_STR(row.request_id, ID);
	CHECK_EQ_INT(row.estimated_tokens, ACCT_NONE);
	/* The key's team now, when it has one: the team's rollups count the row. */
	{
		char err[128];

		CHECK_EQ_STR(row.tags, "");
		CHECK_EQ_INT(db_exec(fx.db, "INSERT INTO teams (id, name, created_at, tags) VALUES"
		                            " (4, 't', 1, 'project=atlas');"
		                            " UPDATE keys SET team_id = 4, tags = 'env=prod' WHERE id = 2",
		                     err, sizeof(err)), 0);
		CHECK_EQ_INT(fixture_reload(&fx), 0);
		join_record(&rec, ID, NULL, fx.kt, 4096, &row);
		CHECK_EQ_INT(row.team_id, 4);
		/* ... and its fixed tags, so that the tags' rollups and budgets count it */
		CHECK_EQ_STR(row.tags, "env=prod,project=atlas");
		CHECK_EQ_INT(db_exec(fx.db, "UPDATE keys SET team_id = NULL, tags = NULL;"
		                            " DELETE FROM teams", err, sizeof(err)), 0);
		CHECK_EQ_INT(fixture_reload(&fx), 0);
	}
	/* nothing decided: HAProxy answered alone */
	CHECK_EQ_INT(rec_parse(ID, REC("503", "342", "PR", NO_AGENT, NO_USAGE), "-"), 0);
	join_record(&rec, ID, NULL, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.outcome, ACCT_GATEWAY_REJECTED);
	CHECK_EQ_STR(row.verdict, "");
	CHECK_EQ_INT(row.key_id, ACCT_NONE);
	/* failed open: forwarded undecided, a stream without usage. The bytes HAProxy read
	 * bound the prompt, the default the completion. */
	CHECK_EQ_INT(rec_parse(ID, REC("200", "403", "--", "- - - - - 1 -", NO_USAGE), "-"), 0);
	join_record(&rec, ID, NULL, fx.kt, 2048, &row);
	CHECK_EQ_STR(row.verdict, "fail_open");
	CHECK_EQ_INT(row.outcome, ACCT_COMPLETE);
	CHECK_EQ_INT(row.estimated_tokens, (403 + 3) / 4 + 2048);
	/* no model known: no price, the estimate's tokens alone */
	CHECK_EQ_INT(row.estimated_cost_micros, ACCT_NONE);
}

/* HAProxy gave up waiting for the decision and answered alone; the late decision left a
 * pending row. The verdict stays the agent's; the outcome says what HAProxy did. */
static void test_late_decision(void)
{
	struct acct_row p = pending_of(FIX_KEY_OPEN, "{\"model\":\"gpt-a\"}"), row;

	CHECK_EQ_INT(rec_parse(ID, REC("503", "342", "--", "- - - - - - 1", NO_USAGE), "-"), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_STR(row.verdict, "allow");
	CHECK_EQ_INT(row.outcome, ACCT_GATEWAY_REJECTED);
	CHECK_EQ_INT(row.estimated_tokens, ACCT_NONE);
	CHECK_EQ_INT(rec_parse(ID, REC("200", "342", "--", "- - - - - 1 1", NO_USAGE), "-"), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.outcome, ACCT_COMPLETE);
	CHECK(row.estimated_tokens > 0);
}

/* Schema 7's usage classes of a row that bills nothing: NULL, not 0. */
static void check_no_classes(const struct acct_row *row)
{
	CHECK_EQ_INT(row->cache_creation_1h_tokens, ACCT_NONE);
	CHECK_EQ_INT(row->audio_input_tokens, ACCT_NONE);
	CHECK_EQ_INT(row->audio_output_tokens, ACCT_NONE);
	CHECK_EQ_INT(row->accepted_prediction_tokens, ACCT_NONE);
	CHECK_EQ_INT(row->rejected_prediction_tokens, ACCT_NONE);
	CHECK_EQ_INT(row->web_search_calls, ACCT_NONE);
}

/* A record HAProxy wrote before any request had an id names no decision and reports no
 * usage, whatever its fields say: its nonce's MAC vouches for HAProxy, not for them. */
static void test_record_without_id(void)
{
	struct acct_row row;
	char name[ACCT_ID_MAX];

	CHECK_EQ_INT(rec_parse("-", REC("400", "60", "PR", "allow 1 gpt-a oai 1 - -",
	                                "gpt-a 1000 1000 - - - - - -"), "-"), 0);
	record_name(&rec, name, sizeof(name));
	join_record(&rec, name, NULL, fx.kt, 4096, &row);
	CHECK_EQ_STR(row.request_id, "haproxy-4e3c1d2a-9f6b-4c1e-8a7d-2b5f0e9c1a37");
	CHECK_EQ_INT(row.outcome, ACCT_GATEWAY_REJECTED);
	CHECK_EQ_INT(row.key_id, ACCT_NONE);
	CHECK_EQ_STR(row.verdict, "");
	CHECK_EQ_INT(row.prompt_tokens, ACCT_NONE);
	CHECK_EQ_INT(row.usage_source, ACCT_USAGE_NONE);
	CHECK_EQ_INT(row.cost_micros, ACCT_NONE);
	CHECK_EQ_INT(row.estimated_tokens, ACCT_NONE);
	check_no_classes(&row);
}

/* A body cut before its stream flag: the answer's kind tells it. */
static void test_stream_flag_from_the_answer(void)
{
	struct acct_row p = pending_of(FIX_KEY_OPEN, "{\"model\":\"gpt-a\"}"), row;

	p.stream = ACCT_NONE;
	CHECK_EQ_INT(rec_parse(ID, REC("200", "342", "--", AGENT_ALLOW_OPEN, NO_USAGE),
	                       cap('s', "data: {}xxx")), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.stream, 1);
	CHECK_EQ_INT(rec_parse(ID, REC("200", "342", "--", AGENT_ALLOW_OPEN, NO_USAGE),
	                       cap('o', "xxxxxxxxxx")), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.stream, ACCT_NONE);
}

/* An OpenAI answer's web searches, counted by the capture filter into the record's
 * u_ws (tally4), where its usage has none; Anthropic's own count comes first. */
static void test_counted_web_searches(void)
{
	struct acct_row p = pending_of(FIX_KEY_OPEN, "{\"model\":\"gpt-a\"}"), row;
	const char *openai = "{\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":6}}";
	const char *anthropic = "{\"usage\":{\"input_tokens\":5,\"output_tokens\":6,"
	                        "\"server_tool_use\":{\"web_search_requests\":2}}}";
	char line[2048];

	/* After the usage: the answer's id, then the classes (u_ws sixth) and the tier. */
	snprintf(line, sizeof(line), "tally4 - 4e3c1d2a-9f6b-4c1e-8a7d-2b5f0e9c1a37 - %s "
	         "1796278643 040 200 342 555 3 0 0 2 5 -- be_x " AGENT_ALLOW_OPEN " " NO_USAGE
	         " - - - - - - 3 - %s", ID, cap('j', openai));
	CHECK_EQ_INT(record_parse(line, strlen(line), &rec), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.prompt_tokens, 5);
	CHECK_EQ_INT(row.web_search_calls, 3);
	snprintf(line, sizeof(line), "tally4 - 4e3c1d2a-9f6b-4c1e-8a7d-2b5f0e9c1a37 - %s "
	         "1796278643 040 200 342 555 3 0 0 2 5 -- be_x " AGENT_ALLOW_OPEN " " NO_USAGE
	         " - - - - - - 9 - %s", ID, cap('j', anthropic));
	CHECK_EQ_INT(record_parse(line, strlen(line), &rec), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.web_search_calls, 2);
	/* No usage seen: no count of searches either (the row is estimated). */
	snprintf(line, sizeof(line), "tally4 - 4e3c1d2a-9f6b-4c1e-8a7d-2b5f0e9c1a37 - %s "
	         "1796278643 040 200 342 555 3 0 0 2 5 -- be_x " AGENT_ALLOW_OPEN " " NO_USAGE
	         " - - - - - - 3 - %s", ID, cap('j', "{}"));
	CHECK_EQ_INT(record_parse(line, strlen(line), &rec), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.web_search_calls, ACCT_NONE);
}

static void test_expired(void)
{
	struct acct_row p = pending_of(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"max_tokens\":8}"), row;

	join_expired(&p, fx.kt, &row);
	CHECK_EQ_INT(row.outcome, ACCT_NO_RECORD);
	CHECK_EQ_INT(row.usage_source, ACCT_USAGE_NONE);
	CHECK_EQ_INT(row.estimated_tokens, p.est_prompt_tokens + 8);
	CHECK(row.estimated_cost_micros >= 0);
	CHECK_EQ_STR(row.request_id, ID);
	/* a pending denial that never got its record bills nothing */
	p = pending_of("tly_" "nosuchkey0000000000000000000000000000000000", "{}");
	join_expired(&p, fx.kt, &row);
	CHECK_EQ_INT(row.estimated_tokens, ACCT_NONE);
}

static void test_charge(void)
{
	struct acct_row row;
	int64_t tokens, cost;

	acct_row_init(&row);
	join_charge(&row, &tokens, &cost);
	CHECK_EQ_INT(tokens, ACCT_NONE);
	CHECK_EQ_INT(cost, ACCT_NONE);
	row.prompt_tokens = 10;
	row.completion_tokens = 5;
	row.cost_micros = 7;
	join_charge(&row, &tokens, &cost);
	CHECK_EQ_INT(tokens, 15);
	CHECK_EQ_INT(cost, 7);
	/* unpriced: the tokens count, the cost is unknown (0 in the budget) */
	row.cost_micros = ACCT_NONE;
	join_charge(&row, &tokens, &cost);
	CHECK_EQ_INT(tokens, 15);
	CHECK_EQ_INT(cost, ACCT_NONE);
	row.completion_tokens = ACCT_NONE;
	row.estimated_tokens = 100;
	row.estimated_cost_micros = 3;
	join_charge(&row, &tokens, &cost);
	CHECK_EQ_INT(tokens, 110);
	CHECK_EQ_INT(cost, 3);
}

static void test_stream_usage(void)
{
	const char *body = "{\"model\":\"gpt-a\",\"stream\":true,"
	                   "\"stream_options\":{\"include_usage\":true}}";
	struct acct_row p = pending_of(FIX_KEY_OPEN, body), row;

	/* line breaks of the capture arrive as spaces (see record_lines.h) */
	CHECK_EQ_INT(rec_parse(ID, REC("200", "342", "--", AGENT_ALLOW_OPEN, NO_USAGE),
	                       cap('s', "data: {\"model\":\"gpt-a\",\"choices\":[]}\n\n"
	                                "data: {\"model\":\"gpt-a\",\"choices\":[],\"usage\":"
	                                "{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\n"
	                                "data: [DONE]\n\n")), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.outcome, ACCT_COMPLETE);
	CHECK_EQ_INT(row.usage_source, ACCT_USAGE_STREAM);
	CHECK_EQ_INT(row.prompt_tokens, 7);
	CHECK_EQ_INT(row.completion_tokens, 3);
	CHECK_EQ_INT(row.stream, 1);
	CHECK_EQ_INT(row.estimated_tokens, ACCT_NONE);
}

/* A client that leaves once a Responses stream's terminal event passed (Codex CLI
 * closes on response.completed, before the body's end) had the whole answer; one that
 * leaves before it, or after an event that is not terminal, aborted. */
static void test_client_gone_after_the_end(void)
{
	const char *body = "{\"model\":\"gpt-a\",\"stream\":true}";
	const char *created = "event: response.created\ndata: {\"type\":\"response.created\","
	                      "\"response\":{\"id\":\"resp_1\",\"model\":\"gpt-a\"}}\n\n";
	char text[1024];
	struct acct_row p = pending_of(FIX_KEY_OPEN, body), row;

	snprintf(text, sizeof(text), "%sevent: response.completed\ndata: {\"type\":"
	         "\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":7,"
	         "\"output_tokens\":3}}}\n\n", created);
	CHECK_EQ_INT(rec_parse(ID, REC("200", "342", "CD", AGENT_ALLOW_OPEN, NO_USAGE),
	                       cap('s', text)), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.outcome, ACCT_COMPLETE);
	CHECK_EQ_INT(row.usage_source, ACCT_USAGE_STREAM);
	CHECK_EQ_INT(row.prompt_tokens, 7);
	CHECK_EQ_INT(row.completion_tokens, 3);

	/* a client timeout after the end is no abort either */
	CHECK_EQ_INT(rec_parse(ID, REC("200", "342", "cD", AGENT_ALLOW_OPEN, NO_USAGE),
	                       cap('s', text)), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.outcome, ACCT_COMPLETE);

	CHECK_EQ_INT(rec_parse(ID, REC("200", "342", "CD", AGENT_ALLOW_OPEN, NO_USAGE),
	                       cap('s', created)), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.outcome, ACCT_CLIENT_ABORT);
	CHECK_EQ_INT(row.usage_source, ACCT_USAGE_NONE);

	/* a chat stream's usage chunk is not its end ([DONE] is) */
	p = pending_of(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"stream\":true,"
	               "\"stream_options\":{\"include_usage\":true}}");
	CHECK_EQ_INT(rec_parse(ID, REC("200", "342", "CD", AGENT_ALLOW_OPEN, NO_USAGE),
	                       cap('s', "data: {\"model\":\"gpt-a\",\"choices\":[],\"usage\":"
	                                "{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\n")), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.outcome, ACCT_CLIENT_ABORT);
	CHECK_EQ_INT(row.usage_source, ACCT_USAGE_STREAM);
}

static void test_fates(void)
{
	struct acct_row row;

	acct_row_init(&row);
	CHECK_EQ_INT(join_record_fate(0, 0), JOIN_OWED);
	CHECK_EQ_INT(join_record_fate(0, 1), JOIN_RESOLVES);
	CHECK_EQ_INT(join_record_fate(1, 0), JOIN_REPEAT);
	CHECK_EQ_INT(join_decision_fate(0, NULL), JOIN_OWED);
	CHECK_EQ_INT(join_decision_fate(1, &row), JOIN_REPEAT);
	CHECK_EQ_INT(join_decision_fate(2, NULL), JOIN_REPEAT);
	/* asked again after a wait: the same transaction, no copy */
	row.flags = ACCT_FLAG_WAITING;
	CHECK_EQ_INT(join_decision_fate(1, &row), JOIN_RESOLVES);
	row.flags = 0;
	CHECK_EQ_INT(join_expiry_fate(0), JOIN_RESOLVES);
	CHECK_EQ_INT(join_expiry_fate(1), JOIN_RECOUNTED);
	/* Any SPOE error ends the wait (1: timeout, 4: interrupted by the client), unless
	 * the decision came first; no error never does. */
	CHECK(join_record_ends_wait(0, 1));
	CHECK(join_record_ends_wait(0, 4));
	CHECK(!join_record_ends_wait(1, 4));
	CHECK(!join_record_ends_wait(0, ACCT_NONE));
	CHECK(!join_record_ends_wait(0, 0));
}

/* The agent's sequence of arrivals in a few lines, over the real pending table and
 * dedupe: a decision (worker.c), a record (intake.c), an expiry; each emits its row
 * into *rows as the intake would queue it. */
struct flow {
	struct pending *pending;
	struct dedupe *seen;
	int rows;
};

static void flow_decide(struct flow *f, const char *id)
{
	struct acct_row row, old;

	acct_row_init(&row);
	snprintf(row.request_id, sizeof(row.request_id), "%s", id);
	join_count(join_decision_fate(pending_add(f->pending, &row, 1000, &old), &old));
}

static void flow_record(struct flow *f, const char *id, int64_t spoe_error)
{
	struct acct_row pending;
	int seen = dedupe_seen(f->seen, id);
	int admitted = !seen && pending_take(f->pending, id, &pending);
	enum join_fate fate = join_record_fate(seen, admitted);

	join_count(fate);
	if (fate == JOIN_REPEAT)
		return;
	if (join_record_ends_wait(admitted, spoe_error))
		pending_finish(f->pending, id, 1000);
	dedupe_add(f->seen, id, 1000);
	f->rows++;
}

static void flow_expire(struct flow *f, const char *id)
{
	struct acct_row pending;
	enum join_fate fate;

	CHECK(pending_take(f->pending, id, &pending));
	fate = join_expiry_fate(dedupe_seen(f->seen, id));
	join_count(fate);
	if (fate == JOIN_RESOLVES) {
		dedupe_add(f->seen, id, 1000);
		f->rows++;
	}
}

/* Each sequence ends with one row per transaction, counted received once; the rest
 * are duplicates. */
static void test_fates_keep_the_invariant(void)
{
	struct flow f = { pending_new(16), dedupe_new(60000), 0 };
	struct counters c;

	counters_set(&(struct counters){ 0 });
	flow_decide(&f, "a");            /* decided, then recorded */
	flow_record(&f, "a", ACCT_NONE);
	flow_record(&f, "b", 1);         /* recorded after HAProxy gave up, decided late */
	flow_decide(&f, "b");
	flow_record(&f, "c", ACCT_NONE); /* recorded, decided later still, then expired */
	flow_decide(&f, "c");
	flow_expire(&f, "c");
	flow_decide(&f, "d");            /* decided twice, recorded twice */
	flow_decide(&f, "d");
	flow_record(&f, "d", ACCT_NONE);
	flow_record(&f, "d", ACCT_NONE);
	flow_decide(&f, "e");            /* decided, never recorded */
	flow_expire(&f, "e");
	flow_record(&f, "f", ACCT_NONE); /* HAProxy answered alone */
	flow_record(&f, "g", 4);         /* the client went mid-exchange, decided late */
	flow_decide(&f, "g");
	c = counters_now();
	CHECK_EQ_INT(f.rows, 7);
	CHECK_EQ_INT(c.received, 7);
	CHECK_EQ_INT(c.duplicates, 5);
	CHECK_EQ_INT(pending_count(f.pending), 0);
	pending_free(f.pending);
	dedupe_free(f.seen);
}

/* A tally3 record (the stored response's id before the capture): rec_parse's line with
 * today's header. */
static int rec_parse3(int status_ok, const char *u_id, const char *capture)
{
	char tail[8192];

	snprintf(tail, sizeof(tail), "%s %s", u_id, capture);
	if ((status_ok ? rec_parse(ID, REC("200", "342", "--", AGENT_ALLOW_OPEN, NO_USAGE), tail)
	               : rec_parse(ID, REC("500", "342", "--", AGENT_ALLOW_OPEN, NO_USAGE), tail)) < 0)
		return -1;
	memcpy(rec_line, "tally3", 6);
	return record_parse(rec_line, strlen(rec_line), &rec);
}

/* The id of what a create stored comes from its answer, for an admitted create only. */
static void test_stored_response_id(void)
{
	struct decision d = decide_on("/v1/responses", FIX_KEY_OPEN, "{\"model\":\"gpt-a\"}");
	struct acct_row p, row;

	CHECK(d.creates_response);
	join_decided(&d, ID, strlen(ID), 1796278643000, &p);
	CHECK_EQ_INT(p.flags, ACCT_FLAG_CREATES_RESPONSE);
	CHECK_EQ_INT(rec_parse3(1, "resp_1", "-"), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_STR(row.response_id, "resp_1");
	CHECK_EQ_INT(rec_parse3(1, "-", cap('j', "{\"id\":\"resp_2\",\"usage\":null}")), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_STR(row.response_id, "resp_2");
	CHECK_EQ_INT(rec_parse3(1, "-", cap('s', "event: response.created\ndata: {\"type\":"
	                                        "\"response.created\",\"response\":{\"id\":\"resp_3\"}}")), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_STR(row.response_id, "resp_3");
	/* an answer that is no 2xx stored nothing */
	CHECK_EQ_INT(rec_parse3(0, "resp_4", "-"), 0);
	CHECK(rec.u_id.len == 6 && rec.status == 500);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_STR(row.response_id, "");
	/* nor did a chat completion, a denied create, or one no decision saw */
	p = pending_of(FIX_KEY_OPEN, "{\"model\":\"gpt-a\"}");
	CHECK_EQ_INT(rec_parse3(1, "resp_5", "-"), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_STR(row.response_id, "");
	d = decide_on("/v1/responses", FIX_KEY_RESTRICTED, "{\"model\":\"gpt-a\"}");
	CHECK_EQ_INT(d.verdict, DECISION_MODEL_FORBIDDEN);
	join_decided(&d, ID, strlen(ID), 1796278643000, &p);
	CHECK_EQ_INT(p.flags, 0);
	join_record(&rec, ID, NULL, fx.kt, 4096, &row);
	CHECK_EQ_STR(row.response_id, "");
}

/* What a stored response's read answers carries was billed when it was made. */
static void test_unbilled_takes_no_usage(void)
{
	struct decision_owner o = { .known = 1, .e = { .key_id = 1, .model = "gpt-a" } };
	struct decision_request req;
	struct decision d;
	struct acct_row p, row;
	const char *auth = "Bearer " FIX_KEY_OPEN;

	memset(&req, 0, sizeof(req));
	req.authorization = (struct spop_str){ auth, strlen(auth) };
	req.method = (struct spop_str){ "GET", 3 };
	req.path = (struct spop_str){ "/v1/responses/resp_9", 20 };
	decision_make(fx.kt, &req, &d);
	decision_owned_by(fx.kt, &req, &o, &d);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	decision_estimate(&d, &req, 4096);
	join_decided(&d, ID, strlen(ID), 1796278643000, &p);
	CHECK_EQ_INT(p.flags, ACCT_FLAG_UNBILLED);
	CHECK_EQ_INT(rec_parse(ID, REC("200", "342", "--", AGENT_ALLOW_OPEN,
	                               "gpt-a 1000 500 200 - - - - -"), "-"), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.outcome, ACCT_COMPLETE);
	CHECK_EQ_INT(row.usage_source, ACCT_USAGE_NONE);
	CHECK_EQ_INT(row.prompt_tokens, ACCT_NONE);
	CHECK_EQ_INT(row.cost_micros, ACCT_NONE);
	CHECK_EQ_INT(row.estimated_tokens, ACCT_NONE);
	CHECK_EQ_INT(rec_parse(ID, REC("200", "342", "--", AGENT_ALLOW_OPEN, NO_USAGE),
	                       cap('j', "{\"usage\":{\"input_tokens\":5,\"output_tokens\":6}}")), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_INT(row.prompt_tokens, ACCT_NONE);
	CHECK_EQ_INT(row.completion_tokens, ACCT_NONE);
	check_no_classes(&row);
}

/* The capture filter spoiled a cut body past the cut and HAProxy answered the refusal
 * (tally.cfg's tally_spoiled): the row says so, never upstream_rejected; a refusal the
 * agent gives no cut body, or an uncut body's record, changes nothing. */
static void test_refused_past_the_cut(void)
{
	const char *cut = "{\"model\":\"gpt-a\",\"messages\":[{\"role\":\"user\",\"content\":\"xxxx";
	struct acct_row p = pending_of_cut(FIX_KEY_OPEN, cut), row;

	CHECK(p.flags & ACCT_FLAG_SCANNED);
	CHECK_EQ_INT(rec_parse(ID, REC("400", "40300", "--", "unsupported_value 1 gpt-a oai - - -",
	                               NO_USAGE), "-"), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_STR(row.verdict, "unsupported_value");
	CHECK_EQ_INT(row.outcome, ACCT_DENIED);
	CHECK_EQ_INT(row.status, 400);
	CHECK_EQ_STR(row.model_requested, "gpt-a");
	CHECK_EQ_INT(rec_parse(ID, REC("403", "40300", "--", "model_not_allowed 1 gpt-a oai - - -",
	                               NO_USAGE), "-"), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_STR(row.verdict, "model_not_allowed");
	CHECK_EQ_INT(rec_parse(ID, REC("401", "40300", "--", "invalid_api_key 1 gpt-a oai - - -",
	                               NO_USAGE), "-"), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_STR(row.verdict, "allow");
	CHECK_EQ_INT(row.outcome, ACCT_UPSTREAM_REJECTED);
	p = pending_of(FIX_KEY_OPEN, "{\"model\":\"gpt-a\"}");
	CHECK(!(p.flags & ACCT_FLAG_SCANNED));
	CHECK_EQ_INT(rec_parse(ID, REC("400", "342", "--", "unsupported_value 1 gpt-a oai - - -",
	                               NO_USAGE), "-"), 0);
	join_record(&rec, ID, &p, fx.kt, 4096, &row);
	CHECK_EQ_STR(row.verdict, "allow");
	CHECK_EQ_INT(row.outcome, ACCT_UPSTREAM_REJECTED);
}

int main(void)
{
	if (fixture_open(&fx) < 0)
		return 1;
	RUN(test_decided);
	RUN(test_complete_with_usage);
	RUN(test_priced_by_routed_model);
	RUN(test_model_match);
	RUN(test_record_cannot_change_the_decision);
	RUN(test_unseen_usage_is_estimated);
	RUN(test_partial_usage_estimates_the_rest);
	RUN(test_errors_that_bill_nothing);
	RUN(test_without_pending);
	RUN(test_late_decision);
	RUN(test_record_without_id);
	RUN(test_stream_flag_from_the_answer);
	RUN(test_counted_web_searches);
	RUN(test_expired);
	RUN(test_charge);
	RUN(test_stream_usage);
	RUN(test_client_gone_after_the_end);
	RUN(test_fates);
	RUN(test_fates_keep_the_invariant);
	RUN(test_stored_response_id);
	RUN(test_unbilled_takes_no_usage);
	RUN(test_refused_past_the_cut);
	fixture_close(&fx);
	return UNIT_DONE();
}
