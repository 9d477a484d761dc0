/* Unit tests of decision and keytable: keys, revocation, allow-lists, models, bodies. */
#include <stdint.h>
#include <string.h>

#include "acct.h"
#include "decision.h"
#include "join.h"
#include "owner.h"
#include "session.h"
#include "fixture.h"
#include "unit.h"
#include "wording.h"

#define CHAT "/v1/chat/completions"

static struct fixture fx;

/* A POST with a Content-Length unless path starts with "GET " or "CHUNKED ". */
/* The json_max HAProxy announces (its large buffer, 3.4+); 0: the regular buffer. */
static int64_t fix_json_max;
static const struct decision_policy *fix_policy;   /* NULL: the defaults */
/* Who made which stored response; NULL: none known. */
static struct owner *fix_owners;
/* The X-Tally-User header (fix_end_users of them; the last one's value). */
static const char *fix_end_user;
static int64_t fix_end_users;
/* The X-Tally-Tags header likewise. */
static const char *fix_tags;
static int64_t fix_tags_headers;
static const char *fix_query;       /* the query string; NULL: none */

/* What session.c does with a decision that names a stored response: asks fix_owners,
 * the key's creates in flight first, and finishes d with the answer. */
static void decide_owner(const struct decision_request *req, struct decision *d)
{
	struct spop_str id = decision_owner_id(d, req);
	struct decision_owner o = { 0 };

	o.pending = owner_creates_pending(fix_owners, d->key->id);
	o.known = owner_get(fix_owners, id.ptr, id.len, &o.e);
	decision_owned_by(fx.kt, req, &o, d);
}

static struct decision decide_with(const char *auth, const char *xkey, const char *path,
                                   const char *body, int truncated)
{
	struct decision_request req = { 0 };
	struct decision d;

	req.method.ptr = "POST";
	req.body_length_known = 1;
	if (strncmp(path, "GET ", 4) == 0) {
		req.method.ptr = "GET";
		path += 4;
	} else if (strncmp(path, "DELETE ", 7) == 0) {
		req.method.ptr = "DELETE";
		path += 7;
	} else if (strncmp(path, "CHUNKED ", 8) == 0) {
		req.body_length_known = 0;
		path += 8;
	}
	req.method.len = strlen(req.method.ptr);

	if (auth) {
		req.authorization.ptr = auth;
		req.authorization.len = strlen(auth);
	}
	if (xkey) {
		req.api_key.ptr = xkey;
		req.api_key.len = strlen(xkey);
	}
	req.path.ptr = path;
	req.path.len = strlen(path);
	req.body.ptr = body;
	req.body.len = strlen(body);
	req.body_truncated = truncated;
	req.body_size = truncated ? -1 : (int64_t)req.body.len;
	req.json_max = fix_json_max;
	req.policy = fix_policy;
	if (fix_end_user) {
		req.end_user.ptr = fix_end_user;
		req.end_user.len = strlen(fix_end_user);
	}
	req.end_user_headers = fix_end_users;
	if (fix_tags) {
		req.tags.ptr = fix_tags;
		req.tags.len = strlen(fix_tags);
	}
	req.tags_headers = fix_tags_headers;
	if (fix_query) {
		req.query.ptr = fix_query;
		req.query.len = strlen(fix_query);
	}
	decision_make(fx.kt, &req, &d);
	if (d.owner_query && fix_owners)
		decide_owner(&req, &d);
	return d;
}

static struct decision decide(const char *key, const char *body)
{
	char auth[128];

	snprintf(auth, sizeof(auth), "Bearer %s", key);
	return decide_with(auth, NULL, CHAT, body, 0);
}

static void test_keys(void)
{
	struct decision d;

	d = decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\"}");
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK_EQ_INT(d.key->id, 1);
	CHECK_EQ_STR(d.model->provider->backend, "be_oai");

	d = decide_with("  bEaReR\t" FIX_KEY_OPEN "  ", NULL, CHAT, "{\"model\":\"gpt-a\"}", 0);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	d = decide_with(NULL, FIX_KEY_OPEN, "/v1/messages", "{\"model\":\"claude-a\"}", 0);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK_EQ_STR(d.model->provider->backend, "be_ant");

	CHECK_EQ_INT(decide_with(NULL, NULL, CHAT, "{}", 0).verdict, DECISION_NO_KEY);
	CHECK_EQ_INT(decide_with("Basic abc", NULL, CHAT, "{}", 0).verdict, DECISION_NO_KEY);
	CHECK_EQ_INT(decide_with("Bearer ", NULL, CHAT, "{}", 0).verdict, DECISION_NO_KEY);
	CHECK_EQ_INT(decide("tly_nope", "{}").verdict, DECISION_UNKNOWN_KEY);
	/* one character off, and a prefix of a real key */
	CHECK_EQ_INT(decide("tly_open0000000000000000000000000000000000001", "{}").verdict,
	             DECISION_UNKNOWN_KEY);
	CHECK_EQ_INT(decide("tly_open", "{}").verdict, DECISION_UNKNOWN_KEY);
	d = decide(FIX_KEY_REVOKED, "{\"model\":\"gpt-a\"}");
	CHECK_EQ_INT(d.verdict, DECISION_REVOKED_KEY);
	CHECK_EQ_INT(decision_http_status(d.verdict), 401);
}

static void test_allow_lists(void)
{
	CHECK_EQ_INT(decide(FIX_KEY_RESTRICTED, "{\"model\":\"gpt-b\"}").verdict, DECISION_ALLOW);
	CHECK_EQ_INT(decide_with("Bearer " FIX_KEY_RESTRICTED, NULL, "/v1/messages",
	                         "{\"model\":\"claude-a\"}", 0).verdict, DECISION_ALLOW);
	CHECK_EQ_INT(decide(FIX_KEY_RESTRICTED, "{\"model\":\"gpt-a\"}").verdict,
	             DECISION_MODEL_FORBIDDEN);
	CHECK_EQ_INT(decision_http_status(DECISION_MODEL_FORBIDDEN), 403);
	/* an allow-list naming only deleted models allows nothing, not everything */
	CHECK_EQ_INT(decide(FIX_KEY_STALE, "{\"model\":\"gpt-a\"}").verdict, DECISION_MODEL_FORBIDDEN);
	CHECK_EQ_INT(decide(FIX_KEY_OPEN, "{\"model\":\"gpt-b\"}").verdict, DECISION_ALLOW);
}

static void test_models_and_bodies(void)
{
	struct decision d;

	CHECK_EQ_INT(decide(FIX_KEY_OPEN, "{\"model\":\"nope\"}").verdict, DECISION_UNKNOWN_MODEL);
	CHECK_EQ_INT(decide(FIX_KEY_OPEN, "{\"model\":\"GPT-A\"}").verdict, DECISION_UNKNOWN_MODEL);
	CHECK_EQ_INT(decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\"").verdict, DECISION_ALLOW);
	CHECK_EQ_INT(decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\"]").verdict, DECISION_BAD_BODY);
	CHECK_EQ_INT(decide(FIX_KEY_OPEN, "nonsense").verdict, DECISION_BAD_BODY);

	d = decide(FIX_KEY_OPEN, "{\"messages\":[]}");
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK_EQ_INT(d.model_source, DECISION_MODEL_KEY_DEFAULT);
	CHECK_EQ_STR(d.model->name, "gpt-a");
	d = decide(FIX_KEY_OPEN, "");
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK_EQ_STR(d.model->name, "gpt-a");
	CHECK_EQ_INT(decide(FIX_KEY_NODEFAULT, "{\"messages\":[]}").verdict, DECISION_MODEL_REQUIRED);

	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/messages",
	                "{\"model\":\"claude-a\",\"stream\":true}", 0);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK_EQ_INT(d.stream, 1);
	CHECK_EQ_INT(d.model_source, DECISION_MODEL_BODY);
	CHECK(!d.body_truncated);
}

/* Unary JSON goes to json_query only when its answer must fit HAProxy's buffer. */
static void test_capture_choice(void)
{
	CHECK(!decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"max_tokens\":1024}").capture);
	CHECK(!decide(FIX_KEY_OPEN,
	              "{\"model\":\"gpt-a\",\"max_completion_tokens\":50,\"n\":1}").capture);
	CHECK(decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\"}").capture);
	CHECK(decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"max_tokens\":1025}").capture);
	CHECK(decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"max_tokens\":10,\"n\":4}").capture);
	CHECK(decide(FIX_KEY_OPEN,
	             "{\"model\":\"gpt-a\",\"max_tokens\":10,\"logprobs\":true}").capture);
	CHECK(decide(FIX_KEY_OPEN,
	             "{\"model\":\"gpt-a\",\"max_tokens\":10,\"stream\":true}").capture);
	/* A prefix may hide a larger bound after the cut, a body seen whole may not. */
	CHECK(decide_with("Bearer " FIX_KEY_OPEN, NULL, CHAT,
	                  "{\"model\":\"gpt-a\",\"max_tokens\":10,\"messages\":[", 1).capture);
	CHECK(decide_with("Bearer " FIX_KEY_OPEN, NULL, CHAT,
	                  "{\"model\":\"gpt-a\",\"max_tokens\":10,\"messages\":[]}", 1).capture);
	/* A bound only some readers see, or two of them: the answer's size is unknown. */
	CHECK(decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"max_tokens\":10,"
	                           "\"MAX_TOKENS\":90000}").capture);
	CHECK(decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"max_tokens\":10,"
	                           "\"max_tokens\":10}").capture);
	/* Members that grow the answer beyond max_tokens. */
	CHECK(decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"max_tokens\":10,\"echo\":true}").capture);
	CHECK(decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"max_tokens\":10,"
	                           "\"modalities\":[\"text\"]}").capture);
	CHECK(!decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"max_tokens\":10,"
	                            "\"echo\":false,\"best_of\":1,\"top_logprobs\":null}").capture);
}

/* HAProxy 3.4's large buffers (jmax): json_query reads long unary answers, unbounded
 * ones once the buffer holds the longest answer a model gives; streams, cut bodies and
 * vectors still meet the capture filter. */
static void test_capture_choice_with_large_buffers(void)
{
	fix_json_max = 1048576;
	CHECK(!decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"max_tokens\":65536}").capture);
	CHECK(decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"max_tokens\":65537}").capture);
	CHECK(decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\"}").capture);
	fix_json_max = 2097152;
	CHECK(!decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\"}").capture);
	CHECK(!decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"max_tokens\":131072}").capture);
	CHECK(decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"max_tokens\":131073}").capture);
	CHECK(decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"stream\":true}").capture);
	CHECK(decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"n\":2}").capture);
	CHECK(decide_with("Bearer " FIX_KEY_OPEN, NULL, CHAT,
	                  "{\"model\":\"gpt-a\",\"messages\":[]}", 1).capture);
	CHECK(decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/embeddings",
	                  "{\"model\":\"gpt-a\"}", 0).capture);
	/* Smaller than the regular buffer, or nonsense: the regular buffer's rule. */
	fix_json_max = -5;
	CHECK(!decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"max_tokens\":1024}").capture);
	CHECK(decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"max_tokens\":1025}").capture);
	fix_json_max = 0;
}

/* The usage amendment: the edit the capture filter makes, for every stream_options. */
static void test_usage_amendment(void)
{
	struct {
		const char *body, *want;   /* want: the body as edited; NULL: left alone */
	} cases[] = {
		{ "{\"model\":\"gpt-a\",\"stream\":true}",
		  "{\"stream_options\":{\"include_usage\":true},\"model\":\"gpt-a\",\"stream\":true}" },
		{ "{\"model\":\"gpt-a\",\"stream\":true,\"stream_options\":{\"include_usage\": false}}",
		  "{\"model\":\"gpt-a\",\"stream\":true,\"stream_options\":{\"include_usage\": true}}" },
		{ "{\"model\":\"gpt-a\",\"stream\":true,\"stream_options\":{ }}",
		  "{\"model\":\"gpt-a\",\"stream\":true,\"stream_options\":{\"include_usage\":true }}" },
		{ "{\"model\":\"gpt-a\",\"stream\":true,\"stream_options\":{\"x\":1}}",
		  "{\"model\":\"gpt-a\",\"stream\":true,\"stream_options\":{\"include_usage\":true,\"x\":1}}" },
		{ "{\"model\":\"gpt-a\",\"stream\":true,\"stream_options\":null}",
		  "{\"model\":\"gpt-a\",\"stream\":true,\"stream_options\":{\"include_usage\":true}}" },
		{ "{\"model\":\"gpt-a\",\"stream\":true,\"stream_options\":{\"include_usage\":\"no\"}}",
		  "{\"model\":\"gpt-a\",\"stream\":true,\"stream_options\":{\"include_usage\":true}}" },
		{ "{\"model\":\"gpt-a\",\"stream\":true,\"stream_options\":{\"include_usage\":true}}", NULL },
		{ "{\"model\":\"gpt-a\",\"stream\":false}", NULL },
		{ "{\"model\":\"gpt-a\"}", NULL },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct decision d = decide(FIX_KEY_OPEN, cases[i].body);
		char out[512];
		size_t n = strlen(cases[i].body);

		CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
		CHECK(!d.amend_scan);
		if (!cases[i].want) {
			CHECK(d.amend_text == NULL);
			continue;
		}
		CHECK(d.amend_text != NULL && d.amend_at > 0);
		if (!d.amend_text)
			continue;
		snprintf(out, sizeof(out), "%.*s%s%s", (int)d.amend_at, cases[i].body, d.amend_text,
		         cases[i].body + d.amend_at + d.amend_cut);
		CHECK_EQ_STR(out, cases[i].want);
		(void)n;
	}
	/* Two stream_options, or one spelled so that only some readers see it: nobody can
	 * tell what usage was asked for. */
	CHECK_EQ_INT(decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"stream\":true,\"stream_options\":{},"
	                                  "\"stream_options\":{}}").verdict, DECISION_BAD_BODY);
	CHECK_EQ_INT(decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"stream\":true,"
	                                  "\"Stream_Options\":{}}").verdict, DECISION_BAD_BODY);
	CHECK_EQ_INT(decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"stream\":true,\"stream_options\":"
	                                  "{\"include_usage\":true,\"INCLUDE_USAGE\":false}}").verdict,
	             DECISION_BAD_BODY);
	/* Anthropic streams always report usage: nothing to amend. */
	CHECK(decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/messages",
	                  "{\"model\":\"claude-a\",\"stream\":true}", 0).amend_text == NULL);
	/* A chunked body seen whole is amended as any other. */
	CHECK(decide_with("Bearer " FIX_KEY_OPEN, NULL, "CHUNKED " CHAT,
	                  "{\"model\":\"gpt-a\",\"stream\":true}", 0).amend_text != NULL);
}

/* A body longer than the agent saw: the capture filter finishes the amendment. */
static void test_usage_amendment_of_a_cut_body(void)
{
	struct decision d;

	/* stream not seen yet: the body gets room for the amendment */
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, CHAT, "{\"messages\":[{\"content\":\"xx", 1);
	CHECK(d.amend_scan && d.amend_text && strstr(d.amend_text, "include_usage") && d.amend_at == 0);
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, CHAT,
	                "{\"model\":\"gpt-a\",\"stream\":true,\"messages\":[{\"content\":\"xx", 1);
	CHECK(d.amend_scan && d.amend_text);
	/* no stream: only read for a second stream or model, the length kept */
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, CHAT,
	                "{\"model\":\"gpt-a\",\"stream\":false,\"messages\":[{\"content\":\"xx", 1);
	CHECK(d.amend_scan && !d.amend_text);
	/* asked for usage, whole, before the cut */
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, CHAT,
	                "{\"stream\":true,\"stream_options\":{\"include_usage\":true},\"messages\":[", 1);
	CHECK(d.amend_scan && !d.amend_text);
	/* ...but cut inside stream_options: not settled */
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, CHAT,
	                "{\"stream\":true,\"stream_options\":{\"include_usage\":true", 1);
	CHECK(d.amend_scan && d.amend_text);
}

/* A limited key's reservation: prompt bytes / 4 plus the output bound, priced up. */
/* Inputs given by URL or file id are none of the body's bytes: each is estimated apart
 * (an image 1 600 tokens, a file or document 20 000); inline data is in the bytes. */
static void test_estimate_inputs_by_reference(void)
{
	static const char *const bodies[] = {
		"{\"model\":\"gpt-a\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":"
		"[{\"type\":\"image_url\",\"image_url\":{\"url\":\"https://x/a.png\"}}]}]}",
		"{\"model\":\"gpt-a\",\"max_output_tokens\":1,\"input\":[{\"role\":\"user\",\"content\":"
		"[{\"type\":\"input_image\",\"image_url\":\"https://x/a.png\"},{\"type\":\"input_file\","
		"\"file_id\":\"file-1\"}]}]}",
		"{\"model\":\"claude-a\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":"
		"[{\"type\":\"document\",\"source\":{\"type\":\"url\",\"url\":\"https://x/a.pdf\"}},"
		"{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"data\":\"AAAA\"}}]}]}",
	};
	static const int64_t extra[] = { 1600, 1600 + 20000, 20000 };
	const char *const paths[] = { CHAT, "/v1/responses", "/v1/messages" };
	size_t i;

	for (i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
		struct decision_request req = { 0 };
		struct decision d = decide_with("Bearer " FIX_KEY_OPEN, NULL, paths[i], bodies[i], 0);

		req.body.ptr = bodies[i];
		req.body.len = strlen(bodies[i]);
		req.body_size = -1;
		decision_estimate(&d, &req, 4096);
		CHECK_EQ_INT(d.est_prompt_tokens, (int64_t)(strlen(bodies[i]) + 3) / 4 + extra[i]);
	}
}

static void test_estimate(void)
{
	struct decision_request req = { 0 };
	struct decision d;
	const char *body = "{\"model\":\"gpt-a\",\"max_tokens\":100}";   /* 33 bytes */

	d = decide(FIX_KEY_OPEN, body);
	req.body.ptr = body;
	req.body.len = strlen(body);
	req.body_size = -1;
	decision_estimate(&d, &req, 4096);
	CHECK_EQ_INT(d.est_tokens, 9 + 100);
	CHECK_EQ_INT(d.est_prompt_tokens, 9);
	CHECK_EQ_INT(d.est_completion_tokens, 100);
	/* gpt-a: 100 and 200 micro-dollars per Mtok, each part rounded up */
	CHECK_EQ_INT(d.est_cost_micros, 1 + 1);
	/* The size HAProxy announced counts when the buffer held less. */
	req.body_size = 4000000;
	decision_estimate(&d, &req, 4096);
	CHECK_EQ_INT(d.est_tokens, 1000000 + 100);
	CHECK_EQ_INT(d.est_cost_micros, 100 + 1);
	d = decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\"}");
	req.body_size = -1;
	decision_estimate(&d, &req, 4096);
	CHECK_EQ_INT(d.est_tokens, 9 + 4096);
	CHECK_EQ_INT(d.est_completion_tokens, 4096);
	decision_limit(&d, QUOTA_TPM, QUOTA_LEVEL_KEY);
	CHECK_EQ_INT(d.verdict, DECISION_TPM_LIMITED);
	CHECK_EQ_INT(decision_http_status(d.verdict), 429);
	CHECK_EQ_INT(decision_http_status(DECISION_BUDGET_EXCEEDED), 402);
	CHECK_EQ_STR(decision_verdict_name(DECISION_CONCURRENCY_LIMITED), "concurrency_limit");
}

static void test_truncated_bodies(void)
{
	const char *prefix_model_first = "{\"model\":\"claude-a\",\"messages\":[{\"content\":\"xxxx";
	const char *prefix_model_last = "{\"messages\":[{\"content\":\"xxxx";
	struct decision d;

	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/messages", prefix_model_first, 1);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK_EQ_STR(d.model->name, "claude-a");
	CHECK(d.body_truncated);
	CHECK_EQ_INT(d.stream, -1);

	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, CHAT, prefix_model_last, 1);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK_EQ_INT(d.model_source, DECISION_MODEL_KEY_DEFAULT);
	CHECK_EQ_STR(d.model->name, "gpt-a");

	/* HAProxy's own flag without a JSON cut (the cap fell on a boundary) counts too */
	d = decide_with("Bearer " FIX_KEY_RESTRICTED, NULL, CHAT, "{\"model\":\"gpt-b\"}", 1);
	CHECK_EQ_INT(d.verdict, DECISION_BODY_TOO_LARGE);
	CHECK_EQ_INT(decision_http_status(d.verdict), 413);
	d = decide_with("Bearer " FIX_KEY_NODEFAULT, NULL, CHAT, prefix_model_last, 1);
	CHECK_EQ_INT(d.verdict, DECISION_MODEL_REQUIRED);

	/* An allow-list judges the model of a prefix cut inside the object; the capture
	 * filter reads the rest for a second one. Only past the cut, or cut inside its
	 * value, it cannot be judged. */
	d = decide_with("Bearer " FIX_KEY_RESTRICTED, NULL, "/v1/messages", prefix_model_first, 1);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK(d.capture && d.amend_scan);
	CHECK_EQ_INT(decide_with("Bearer " FIX_KEY_RESTRICTED, NULL, CHAT,
	                         "{\"model\":\"gpt-a\",\"messages\":[{\"content\":\"xx", 1).verdict,
	             DECISION_MODEL_FORBIDDEN);
	/* With "model" only past the cut, the key's default routes it and the capture
	 * filter judges the model it meets against what that provider may serve the key;
	 * on the other API's path the default cannot route it. */
	d = decide_with("Bearer " FIX_KEY_RESTRICTED, NULL, CHAT, prefix_model_last, 1);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK(d.allow_scan && d.amend_scan && d.capture);
	CHECK_EQ_STR(d.model->name, "gpt-b");
	CHECK_EQ_INT(d.model_source, DECISION_MODEL_KEY_DEFAULT);
	d = decide_with("Bearer " FIX_KEY_RESTRICTED, NULL, "/v1/messages", prefix_model_last, 1);
	CHECK(d.verdict == DECISION_ALLOW && d.allow_scan);
	CHECK_EQ_STR(d.model->name, "claude-a");
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, CHAT, prefix_model_last, 1);
	CHECK(!d.allow_scan);
	/* cut inside its value: the filter meets the whole value past the cut */
	d = decide_with("Bearer " FIX_KEY_RESTRICTED, NULL, CHAT, "{\"model\":\"gpt-b", 1);
	CHECK(d.verdict == DECISION_ALLOW && d.allow_scan);

	/* With budgets per model (the key's or its team's), a model past the cut may be
	 * the route alone, the budgets the request was held at; a key without a route
	 * for it cannot send such a body. */
	{
		char err[256], buf[64];

		CHECK_EQ_INT(db_exec(fx.db, "INSERT INTO model_budgets (key_id, model, created_at,"
		                            " budget_micros) VALUES (1, 'gpt-a', 1, 5), (2, 'gpt-a', 1, 5),"
		                            " (4, 'gpt-b', 1, 5)", err, sizeof(err)), 0);
		CHECK_EQ_INT(fixture_reload(&fx), 0);
		d = decide_with("Bearer " FIX_KEY_RESTRICTED, NULL, CHAT, prefix_model_last, 1);
		CHECK(d.verdict == DECISION_ALLOW && d.allow_scan && d.scan_route_only);
		CHECK_EQ_INT(decision_scan_list(&d, buf, sizeof(buf)), 5);
		CHECK_EQ_STR(buf, "gpt-b");
		d = decide_with("Bearer " FIX_KEY_OPEN, NULL, CHAT, prefix_model_last, 1);
		CHECK(d.verdict == DECISION_ALLOW && d.allow_scan && d.scan_route_only);
		CHECK_EQ_INT(decision_scan_list(&d, buf, sizeof(buf)), strlen(d.model->name));
		CHECK_EQ_STR(buf, d.model->name);
		CHECK_EQ_INT(decide_with("Bearer " FIX_KEY_NODEFAULT, NULL, CHAT, prefix_model_last,
		                         1).verdict, DECISION_BODY_TOO_LARGE);
		/* A model the prefix names is judged as without budgets. */
		d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/messages", prefix_model_first, 1);
		CHECK(d.verdict == DECISION_ALLOW && !d.allow_scan);
		CHECK_EQ_INT(db_exec(fx.db, "DELETE FROM model_budgets", err, sizeof(err)), 0);
		CHECK_EQ_INT(fixture_reload(&fx), 0);
	}
}

/* The list the capture filter judges a model past the cut by: the key's allowed models
 * its default's provider serves, a name a line; names it could not match as sent are
 * left out, and a list that does not fit says how long it is. */
static void test_allow_list(void)
{
	struct decision d = decide_with("Bearer " FIX_KEY_RESTRICTED, NULL, CHAT,
	                                "{\"messages\":[{\"content\":\"xx", 1);
	const struct kt_model *odd[3];
	struct kt_model quoted = *d.key->default_model, plain = quoted;
	struct kt_key k = *d.key;
	char buf[64];

	CHECK_EQ_INT(decision_allow_list(d.key, d.model->provider, buf, sizeof(buf)), 5);
	CHECK_EQ_STR(buf, "gpt-b");
	quoted.name = "gpt-\"x";
	plain.name = "gpt-c";
	odd[0] = d.key->default_model;
	odd[1] = &quoted;
	odd[2] = &plain;
	k.allowed = odd;
	k.nallowed = 3;
	CHECK_EQ_INT(decision_allow_list(&k, d.model->provider, buf, sizeof(buf)), 11);
	CHECK_EQ_STR(buf, "gpt-b\ngpt-c");
	CHECK_EQ_INT(decision_allow_list(&k, d.model->provider, buf, 8), 11);
	CHECK_EQ_STR(buf, "gpt-b");
	CHECK_EQ_INT(decision_allow_list(&k, d.model->provider, NULL, 0), 11);
}

/* Anthropic's count_tokens is judged like a message (key, model, allow-list) but bills
 * nothing: no estimate to reserve or charge, no capture to pay for. */
static void test_count_tokens_is_unbilled(void)
{
	struct decision_request req = { 0 };
	struct decision d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/messages/count_tokens",
	                                "{\"model\":\"claude-a\",\"stream\":true,\"messages\":[]}", 0);

	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK(d.unbilled && !d.capture);
	req.body_size = 4000;
	decision_estimate(&d, &req, 4096);
	CHECK(d.est_tokens == 0 && d.est_cost_micros == 0);
	CHECK_EQ_INT(decide_with("Bearer " FIX_KEY_RESTRICTED, NULL, "/v1/messages/count_tokens",
	                         "{\"model\":\"gpt-a\"}", 0).verdict, DECISION_MODEL_FORBIDDEN);
	CHECK_EQ_INT(decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/messages/count_tokens",
	                         "{\"model\":\"gpt-a\"}", 0).verdict, DECISION_WRONG_API);
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/messages", "{\"model\":\"claude-a\"}", 0);
	CHECK(!d.unbilled);
}

/* A GET of the model list or of one model, with the key in Authorization (OpenAI's
 * shape) or x-api-key (Anthropic's); its JSON into buf. */
static struct decision list_models(const char *key, int anthropic, const char *path, char *buf,
                                   size_t cap, int *len)
{
	struct decision_request req = { 0 };
	struct decision d;
	char auth[128];

	snprintf(auth, sizeof(auth), "Bearer %s", key);
	req.method.ptr = "GET";
	req.method.len = 3;
	req.path.ptr = path;
	req.path.len = strlen(path);
	if (anthropic) {
		req.api_key.ptr = key;
		req.api_key.len = strlen(key);
	} else {
		req.authorization.ptr = auth;
		req.authorization.len = strlen(auth);
	}
	decision_make(fx.kt, &req, &d);
	*len = d.verdict == DECISION_MODELS_LISTED ? wording_models_json(fx.kt, &d, &req, buf, cap)
	                                           : wording_error_json(&d, &req, buf, cap);
	return d;
}

/* GET /v1/models is the gateway's own answer: the models the key may use, of the API
 * the client speaks, in that API's shape; one of them by id; anything else unknown. */
static void test_model_lists(void)
{
	char buf[8192];
	struct decision d;
	int n;

	d = list_models(FIX_KEY_OPEN, 0, "/v1/models", buf, sizeof(buf), &n);
	CHECK_EQ_INT(d.verdict, DECISION_MODELS_LISTED);
	CHECK_EQ_INT(decision_http_status(d.verdict), 200);
	CHECK(n > 0 && (size_t)n == strlen(buf));
	CHECK(strncmp(buf, "{\"object\":\"list\",\"data\":[{\"id\":\"gpt-a\",\"object\":\"model\","
	              "\"created\":1,\"owned_by\":\"oai\"},{\"id\":\"gpt-b\"", 94) == 0);
	CHECK(strstr(buf, "claude-a") == NULL);
	d = list_models(FIX_KEY_OPEN, 1, "/v1/models", buf, sizeof(buf), &n);
	CHECK_EQ_STR(buf, "{\"data\":[{\"type\":\"model\",\"id\":\"claude-a\",\"display_name\":"
	             "\"claude-a\",\"created_at\":\"1970-01-01T00:00:01Z\"}],\"has_more\":false,"
	             "\"first_id\":\"claude-a\",\"last_id\":\"claude-a\"}");
	/* a restricted key sees its own models only */
	d = list_models(FIX_KEY_RESTRICTED, 0, "/v1/models", buf, sizeof(buf), &n);
	CHECK_EQ_STR(buf, "{\"object\":\"list\",\"data\":[{\"id\":\"gpt-b\",\"object\":\"model\","
	             "\"created\":1,\"owned_by\":\"oai\"}]}");
	d = list_models(FIX_KEY_RESTRICTED, 0, "/v1/models/gpt-b", buf, sizeof(buf), &n);
	CHECK_EQ_INT(d.verdict, DECISION_MODELS_LISTED);
	CHECK_EQ_STR(buf, "{\"id\":\"gpt-b\",\"object\":\"model\",\"created\":1,\"owned_by\":\"oai\"}");
	d = list_models(FIX_KEY_RESTRICTED, 0, "/v1/models/gpt-a", buf, sizeof(buf), &n);
	CHECK_EQ_INT(d.verdict, DECISION_UNKNOWN_MODEL);
	CHECK(strstr(buf, "model_not_found") && strstr(buf, "'gpt-a'"));
	d = list_models(FIX_KEY_OPEN, 0, "/v1/models/claude-a", buf, sizeof(buf), &n);
	CHECK_EQ_INT(d.verdict, DECISION_UNKNOWN_MODEL);
	CHECK_EQ_INT(list_models(FIX_KEY_OPEN, 0, "/v1/models/", buf, sizeof(buf), &n).verdict,
	             DECISION_BAD_ENDPOINT);
	CHECK_EQ_INT(list_models(FIX_KEY_OPEN, 0, "/v1/modelsx", buf, sizeof(buf), &n).verdict,
	             DECISION_BAD_ENDPOINT);
	CHECK_EQ_INT(list_models("tly_nobody", 0, "/v1/models", buf, sizeof(buf), &n).verdict,
	             DECISION_UNKNOWN_KEY);
	CHECK_EQ_INT(list_models(FIX_KEY_REVOKED, 0, "/v1/models", buf, sizeof(buf), &n).verdict,
	             DECISION_REVOKED_KEY);
	/* a list longer than the room holds what fits; Anthropic's says there is more */
	d = list_models(FIX_KEY_OPEN, 0, "/v1/models", buf, 2950, &n);
	CHECK(n > 0 && strcmp(buf + n - 2, "]}") == 0);
	CHECK_EQ_INT(list_models(FIX_KEY_OPEN, 1, "/v1/models", buf, 100, &n).verdict,
	             DECISION_MODELS_LISTED);
	CHECK_EQ_INT(n, -1);
	CHECK_EQ_INT(decide_with("Bearer " FIX_KEY_OPEN, NULL, "GET /v1/models", "", 0).verdict,
	             DECISION_MODELS_LISTED);
}

/* /v1/responses is an OpenAI endpoint bounded by max_output_tokens, whose streams need
 * no amendment (their usage always comes); a chat body's max_output_tokens bounds
 * nothing. */
static void test_responses_endpoint(void)
{
	struct decision_request req = { 0 };
	struct decision d;

	/* Its answer echoes the request: json_query only with large buffers, and only while
	 * the body and the output fit them. */
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/responses",
	                "{\"model\":\"gpt-a\",\"input\":\"hi\",\"max_output_tokens\":200}", 0);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK(d.capture && d.max_output == 200);
	fix_json_max = 2097152;
	CHECK(!decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/responses",
	                   "{\"model\":\"gpt-a\",\"input\":\"hi\",\"max_output_tokens\":200}",
	                   0).capture);
	CHECK(decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/responses",
	                  "{\"model\":\"gpt-a\",\"input\":\"hi\",\"max_output_tokens\":131072}",
	                  0).capture);
	CHECK(decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/responses",
	                  "{\"model\":\"gpt-a\",\"input\":\"hi\",\"max_output_tokens\":200}",
	                  1).capture);
	fix_json_max = 0;
	decision_estimate(&d, &req, 4096);
	CHECK_EQ_INT(d.est_completion_tokens, 200);
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/responses",
	                "{\"model\":\"gpt-a\",\"input\":\"hi\",\"stream\":true}", 0);
	CHECK(d.verdict == DECISION_ALLOW && d.capture && d.stream == 1);
	CHECK(!d.amend_text && !d.amend_scan);
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, CHAT,
	                "{\"model\":\"gpt-a\",\"max_output_tokens\":200}", 0);
	CHECK(d.verdict == DECISION_ALLOW && d.max_output == -1 && d.capture);
	decision_estimate(&d, &req, 4096);
	CHECK_EQ_INT(d.est_completion_tokens, 4096);
	CHECK_EQ_INT(decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/responses",
	                         "{\"model\":\"claude-a\",\"input\":\"hi\"}", 0).verdict,
	             DECISION_WRONG_API);
	/* state stored upstream is every key's under one account: a conversation is not
	 * served, nor is a response the gateway does not know the key made */
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/responses",
	                "{\"model\":\"gpt-a\",\"previous_response_id\":\"resp_x\"}", 0);
	CHECK_EQ_INT(d.verdict, DECISION_UNKNOWN_RESPONSE);
	CHECK_EQ_INT(decision_http_status(d.verdict), 404);
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/responses",
	                "{\"model\":\"gpt-a\",\"previous_response_id\":\"resp\\u005fx\"}", 0);
	CHECK_EQ_INT(d.verdict, DECISION_STORED_STATE);
	CHECK_EQ_INT(decision_http_status(d.verdict), 400);
	CHECK_EQ_INT(decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/responses/input_tokens",
	                         "{\"model\":\"gpt-a\",\"conversation\":\"conv_x\"}", 0).verdict,
	             DECISION_STORED_STATE);
	CHECK_EQ_INT(decide_with("Bearer " FIX_KEY_OPEN, NULL, CHAT,
	                         "{\"model\":\"gpt-a\",\"conversation\":\"conv_x\"}", 0).verdict,
	             DECISION_ALLOW);
	/* an item_reference names an output item, whose key the gateway cannot tell */
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/responses",
	                "{\"model\":\"gpt-a\",\"input\":[{\"type\":\"item_reference\",\"id\":\"msg_x\"}]}", 0);
	CHECK_EQ_INT(d.verdict, DECISION_STORED_STATE);
	CHECK_EQ_INT(decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/responses",
	                         "{\"model\":\"gpt-a\",\"input\":[{\"type\":\"message\",\"role\":\"user\",\"content\":\"hi\"}]}", 0).verdict,
	             DECISION_ALLOW);
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/responses",
	                "{\"model\":\"gpt-a\",\"input\":\"xxxx", 1);
	CHECK(d.verdict == DECISION_ALLOW && d.stateless_scan && d.amend_scan);
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, CHAT, "{\"model\":\"gpt-a\",\"messages\":[\"xx", 1);
	CHECK(d.verdict == DECISION_ALLOW && !d.stateless_scan);
}

static void test_error_bodies(void)
{
	struct decision_request req = { 0 };
	struct decision d;
	char buf[2048];
	int n;

	req.path.ptr = "/v1/chat/completions";
	req.path.len = strlen(req.path.ptr);
	d = decide(FIX_KEY_RESTRICTED, "{\"model\":\"gpt-a\"}");
	n = wording_error_json(&d, &req, buf, sizeof(buf));
	CHECK(n > 0);
	CHECK(strstr(buf, "\"code\":\"model_not_allowed\"") != NULL);
	CHECK(strstr(buf, "tly_restrict") != NULL);

	/* client text is escaped into the JSON */
	d = decide(FIX_KEY_OPEN, "{\"model\":\"a\\\"b\\\\c\\u0001\"}");
	CHECK_EQ_INT(d.verdict, DECISION_UNKNOWN_MODEL);
	n = wording_error_json(&d, &req, buf, sizeof(buf));
	CHECK(n > 0 && strstr(buf, "'a\\\"b\\\\c\\u0001'") != NULL);

	req.path.ptr = "/v1/messages";
	req.path.len = strlen(req.path.ptr);
	d = decide("tly_x", "{}");
	n = wording_error_json(&d, &req, buf, sizeof(buf));
	CHECK(n > 0 && strncmp(buf, "{\"type\":\"error\",\"error\":{\"type\":\"authentication_error\"", 53) == 0);
	CHECK_EQ_INT(wording_error_json(&d, &req, buf, 10), -1);
}

static void test_endpoints_and_apis(void)
{
	struct decision d;

	CHECK_EQ_INT(decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/embeddings",
	                         "{\"model\":\"gpt-a\"}", 0).verdict, DECISION_ALLOW);
	CHECK_EQ_INT(decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/files", "{}", 0).verdict,
	             DECISION_BAD_ENDPOINT);
	CHECK_EQ_INT(decide_with("Bearer " FIX_KEY_OPEN, NULL, "GET /v1/chat/completions", "", 0).verdict,
	             DECISION_BAD_ENDPOINT);
	CHECK_EQ_INT(decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/chat/completions/", "{}", 0).verdict,
	             DECISION_BAD_ENDPOINT);
	CHECK_EQ_INT(decision_http_status(DECISION_BAD_ENDPOINT), 404);
	/* the key is judged first: a bad key learns nothing about endpoints */
	CHECK_EQ_INT(decide_with("Bearer tly_x", NULL, "/v1/files", "{}", 0).verdict,
	             DECISION_UNKNOWN_KEY);
	/* an Anthropic model on the OpenAI endpoint, and the default model the other way */
	d = decide(FIX_KEY_OPEN, "{\"model\":\"claude-a\"}");
	CHECK_EQ_INT(d.verdict, DECISION_WRONG_API);
	CHECK_EQ_INT(decide_with(NULL, FIX_KEY_OPEN, "/v1/messages", "{\"max_tokens\":5}", 0).verdict,
	             DECISION_WRONG_API);
}

static void test_chunked_bodies(void)
{
	struct decision d;

	/* without a Content-Length only a whole object proves the body was seen whole */
	d = decide_with("Bearer " FIX_KEY_RESTRICTED, NULL, "CHUNKED " CHAT, "{\"model\":\"gpt-b\"}", 0);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK(!d.body_truncated);
	d = decide_with("Bearer " FIX_KEY_RESTRICTED, NULL, "CHUNKED " CHAT, "   \n  ", 0);
	CHECK_EQ_INT(d.verdict, DECISION_BODY_TOO_LARGE);
	d = decide_with("Bearer " FIX_KEY_RESTRICTED, NULL, "CHUNKED " CHAT, "", 0);
	CHECK_EQ_INT(d.verdict, DECISION_BODY_TOO_LARGE);
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "CHUNKED " CHAT, "", 0);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK(d.body_truncated);
	CHECK_EQ_INT(d.model_source, DECISION_MODEL_KEY_DEFAULT);
	/* with a Content-Length, an empty body is empty */
	d = decide_with("Bearer " FIX_KEY_RESTRICTED, NULL, CHAT, "", 0);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK(!d.body_truncated);
}

/* A restricted key without a default whose "model" comes past the cut is routed by the
 * provider that serves its allowed models of the endpoint's API, on the dearest of them;
 * when two providers do, the route is unknown and the body refused. */
static void test_cut_route_without_default(void)
{
	const char *key = "tly_cutroute000000000000000000000000000000000";
	const char *auth = "Bearer tly_cutroute000000000000000000000000000000000";
	const char *cut = "{\"messages\":[{\"content\":\"xx";
	char err[256];
	struct decision d;

	CHECK_EQ_INT(fixture_add_key(&fx, 60, "cut-route", key, NULL, 0), 0);
	CHECK_EQ_INT(db_exec(fx.db,
	                     "INSERT INTO providers (id, name, api, backend, created_at) VALUES"
	                     " (3, 'oai2', 'openai', 'be_oai2', 1);"
	                     "INSERT INTO models (id, name, provider_id, created_at, updated_at)"
	                     " VALUES (40, 'gpt-z', 3, 1, 1);"
	                     "INSERT INTO model_prices (model_id, tier, above_tokens,"
	                     " input_micros_per_mtok, output_micros_per_mtok) VALUES"
	                     " (40, 'default', 0, 1, 1);"
	                     "INSERT INTO key_models VALUES (60, 'gpt-a'), (60, 'gpt-b');",
	                     err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&fx), 0);
	d = decide_with(auth, NULL, CHAT, cut, 1);
	CHECK(d.verdict == DECISION_ALLOW && d.allow_scan);
	CHECK_EQ_STR(d.model->name, "gpt-a");
	CHECK_EQ_INT(decide_with(auth, NULL, "/v1/messages", cut, 1).verdict, DECISION_BODY_TOO_LARGE);
	CHECK_EQ_INT(db_exec(fx.db, "INSERT INTO key_models VALUES (60, 'gpt-z')", err,
	                     sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&fx), 0);
	CHECK_EQ_INT(decide_with(auth, NULL, CHAT, cut, 1).verdict, DECISION_BODY_TOO_LARGE);
}

/* docs/pricing.md: what a request asks for that costs more, judged against the key's
 * policy, the agent's, and the card of the tier asked for. */
static enum decision_verdict costly(const char *model, const char *path, const char *extra)
{
	char body[1024];

	snprintf(body, sizeof(body), "{\"model\":\"%s\",\"max_tokens\":8%s}", model, extra);
	return decide_with("Bearer " FIX_KEY_OPEN, NULL, path, body, 0).verdict;
}

/* A message marked for the prompt cache: a cache write asked for. */
static const char *const cached =
	",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\","
	"\"cache_control\":{\"type\":\"ephemeral\"}}]}]";

/* Runs sql on the fixture's store and reloads the table; 0 or -1. */
static int change(const char *sql)
{
	char err[256];

	return db_exec(fx.db, sql, err, sizeof(err)) < 0 ? -1 : fixture_reload(&fx);
}

/* claude-a priced, cache writes not. */
static const char *const unpriced_writes =
	"DELETE FROM model_prices WHERE model_id = 3;"
	"INSERT INTO model_prices (model_id, tier, above_tokens, input_micros_per_mtok,"
	" output_micros_per_mtok) VALUES (3, 'default', 0, 300, 400)";

/* Prompt cache writes (cache_control at any depth) on a card that prices none are refused
 * before the provider under the agent's --cache-writes priced (the default), passed
 * where the card prices them or the policy allows, refused under deny. */
static void test_cache_writes(void)
{
	struct decision_policy pol = { NULL, KT_POLICY_PRICED, KT_POLICY_PRICED, KT_POLICY_PRICED, 0 };
	char err[256];
	struct decision d;

	CHECK_EQ_INT(change(unpriced_writes), 0);
	/* The default allows them (charged at the fallback rate). */
	CHECK_EQ_INT(costly("claude-a", "/v1/messages", cached), DECISION_ALLOW);
	fix_policy = &pol;
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/messages",
	                "{\"model\":\"claude-a\",\"max_tokens\":8,\"system\":[{\"type\":\"text\","
	                "\"text\":\"x\",\"Cache_Control\":{\"type\":\"ephemeral\"}}]}", 0);
	CHECK(d.verdict == DECISION_COST_POLICY && d.costly == DECISION_COSTLY_CACHE);
	CHECK_EQ_INT(costly("claude-a", "/v1/messages", cached), DECISION_COST_POLICY);
	/* null asks for nothing; counting tokens bills nothing; a model without any price
	 * stays as it was (its rows unpriced) */
	CHECK_EQ_INT(costly("claude-a", "/v1/messages", ",\"system\":[{\"type\":\"text\","
	                    "\"text\":\"x\",\"cache_control\":null}]"), DECISION_ALLOW);
	CHECK_EQ_INT(costly("claude-a", "/v1/messages/count_tokens", cached), DECISION_ALLOW);
	pol.cache_writes = KT_POLICY_ALLOW;
	CHECK_EQ_INT(costly("claude-a", "/v1/messages", cached), DECISION_ALLOW);
	pol.cache_writes = KT_POLICY_PRICED;
	CHECK_EQ_INT(db_exec(fx.db, "UPDATE model_prices SET cache_write_micros_per_mtok = 375"
	                            " WHERE model_id = 3", err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&fx), 0);
	CHECK_EQ_INT(costly("claude-a", "/v1/messages", cached), DECISION_ALLOW);
	pol.cache_writes = KT_POLICY_DENY;
	CHECK_EQ_INT(costly("claude-a", "/v1/messages", cached), DECISION_COST_POLICY);
	fix_policy = NULL;
	CHECK_EQ_INT(db_exec(fx.db, "UPDATE model_prices SET cache_write_micros_per_mtok = NULL"
	                            " WHERE model_id = 3", err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&fx), 0);
}

/* A key's own cache_writes (issue 28) wins over the agent's --cache-writes either way;
 * NULL (inherit) follows the agent's. */
static void test_key_cache_writes(void)
{
	struct decision_policy pol = { NULL, KT_POLICY_PRICED, KT_POLICY_PRICED, KT_POLICY_ALLOW, 0 };

	CHECK_EQ_INT(change(unpriced_writes), 0);
	CHECK_EQ_INT(change("UPDATE keys SET cache_writes = 'deny' WHERE id = 1"), 0);
	fix_policy = &pol;
	CHECK(decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/messages", "{\"model\":\"claude-a\","
	                  "\"system\":[{\"text\":\"x\",\"cache_control\":{}}]}", 0).costly ==
	      DECISION_COSTLY_CACHE);
	CHECK_EQ_INT(costly("claude-a", "/v1/messages", cached), DECISION_COST_POLICY);
	CHECK_EQ_INT(costly("claude-a", "/v1/messages", ""), DECISION_ALLOW);
	/* The agent's deny does not refuse a key that allows them; priced judges the card. */
	pol.cache_writes = KT_POLICY_DENY;
	CHECK_EQ_INT(change("UPDATE keys SET cache_writes = 'allow' WHERE id = 1"), 0);
	CHECK_EQ_INT(costly("claude-a", "/v1/messages", cached), DECISION_ALLOW);
	pol.cache_writes = KT_POLICY_ALLOW;
	CHECK_EQ_INT(change("UPDATE keys SET cache_writes = 'priced' WHERE id = 1"), 0);
	CHECK_EQ_INT(costly("claude-a", "/v1/messages", cached), DECISION_COST_POLICY);
	/* NULL: the agent's, whichever it is. */
	CHECK_EQ_INT(change("UPDATE keys SET cache_writes = NULL WHERE id = 1"), 0);
	CHECK_EQ_INT(costly("claude-a", "/v1/messages", cached), DECISION_ALLOW);
	pol.cache_writes = KT_POLICY_DENY;
	CHECK_EQ_INT(costly("claude-a", "/v1/messages", cached), DECISION_COST_POLICY);
	fix_policy = NULL;
}

/* A body above the policy's max_body is refused before anything else is judged, in its
 * API's error shape; one at the cap, or whose size is unknown (chunked: the capture
 * filter counts it), is judged as any. */
static void test_body_cap(void)
{
	struct decision_policy pol = { NULL, KT_POLICY_PRICED, KT_POLICY_PRICED, KT_POLICY_PRICED, 100 };
	const char *body = "{\"model\":\"gpt-a\",\"messages\":[]}";
	struct decision_request req = { 0 };
	struct decision d;
	char json[2048];
	int n;

	req.method = (struct spop_str){ "POST", 4 };
	req.authorization = (struct spop_str){ "Bearer " FIX_KEY_OPEN, strlen("Bearer " FIX_KEY_OPEN) };
	req.path = (struct spop_str){ CHAT, strlen(CHAT) };
	req.body = (struct spop_str){ body, strlen(body) };
	req.body_length_known = 1;
	req.policy = &pol;
	req.body_size = 101;
	decision_make(fx.kt, &req, &d);
	CHECK_EQ_INT(d.verdict, DECISION_BODY_TOO_LARGE);
	CHECK_EQ_INT(decision_http_status(d.verdict), 413);
	n = wording_error_json(&d, &req, json, sizeof(json));
	CHECK(n > 0 && strstr(json, "\"code\":\"body_too_large\"") &&
	      strstr(json, "larger than this gateway accepts (100 bytes)"));
	req.path = (struct spop_str){ "/v1/messages", 12 };
	decision_make(fx.kt, &req, &d);
	n = wording_error_json(&d, &req, json, sizeof(json));
	CHECK(n > 0 && strstr(json, "{\"type\":\"error\",\"error\":{\"type\":\"request_too_large\""));
	req.path = (struct spop_str){ CHAT, strlen(CHAT) };
	req.body_size = 100;
	decision_make(fx.kt, &req, &d);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	req.body_size = -1;
	req.body_length_known = 0;
	decision_make(fx.kt, &req, &d);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	/* who asks comes first: a stranger learns nothing of the cap */
	req.body_size = 101;
	req.authorization = (struct spop_str){ "Bearer tly_x", 12 };
	decision_make(fx.kt, &req, &d);
	CHECK_EQ_INT(d.verdict, DECISION_UNKNOWN_KEY);
	pol.max_body = 0;
	req.authorization = (struct spop_str){ "Bearer " FIX_KEY_OPEN, strlen("Bearer " FIX_KEY_OPEN) };
	decision_make(fx.kt, &req, &d);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
}

static void test_cost_policy(void)
{
	static const char *const web = ",\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"w\"}]";
	/* A web search, and a client tool whose schema says "type" one level down. */
	static const char *const priority_web =
		",\"service_tier\":\"priority\",\"tools\":[{\"type\":\"web_search_20250305\","
		"\"name\":\"w\"},{\"name\":\"mine\",\"input_schema\":{\"type\":\"web_search\"}}]";
	struct decision_policy pol = { NULL, KT_POLICY_PRICED, KT_POLICY_PRICED, KT_POLICY_PRICED, 0 };
	char err[256];
	struct decision d;

	CHECK_EQ_INT(db_exec(fx.db,
	                     "INSERT INTO model_prices (model_id, tier, above_tokens,"
	                     " input_micros_per_mtok, output_micros_per_mtok,"
	                     " audio_output_micros_per_mtok, web_search_micros_per_call) VALUES"
	                     " (1, 'priority', 0, 200, 400, 9000, 10000),"
	                     " (3, 'priority', 0, 600, 800, NULL, 10000);"
	                     "UPDATE keys SET service_tiers = 'default,flex' WHERE id = 4;",
	                     err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&fx), 0);
	/* Tiers: priced ones pass, others are refused before any provider sees them. */
	CHECK_EQ_INT(costly("gpt-a", CHAT, ",\"service_tier\":\"priority\""), DECISION_ALLOW);
	CHECK_EQ_INT(costly("gpt-a", CHAT, ",\"service_tier\":\"auto\""), DECISION_ALLOW);
	d = decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"service_tier\":\"flex\"}");
	CHECK(d.verdict == DECISION_COST_POLICY && d.costly == DECISION_COSTLY_TIER);
	CHECK_EQ_INT(costly("gpt-a", CHAT, ",\"service_tier\":7"), DECISION_COST_POLICY);
	CHECK_EQ_INT(costly("gpt-a", CHAT, ",\"service_tier\":\"Priority\""), DECISION_COST_POLICY);
	CHECK_EQ_INT(costly("gpt-a", CHAT, ",\"Service_Tier\":\"priority\""), DECISION_COST_POLICY);
	CHECK_EQ_INT(costly("gpt-a", CHAT, ",\"service_tier\":null"), DECISION_ALLOW);
	/* The reservation takes the tier's card: 8 output tokens at 400, not 200. */
	d = decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"max_tokens\":8,\"service_tier\":\"priority\"}");
	decision_estimate(&d, &(struct decision_request){ .body_size = 4 }, 4096);
	CHECK_EQ_INT(d.est_card.micros[PRICE_OUTPUT], 400);
	/* And the card of its prompt's size: above 100 tokens (401 bytes), the long one. */
	CHECK_EQ_INT(db_exec(fx.db, "INSERT INTO model_prices (model_id, tier, above_tokens,"
	                            " input_micros_per_mtok, output_micros_per_mtok) VALUES"
	                            " (1, 'default', 100, 1000000, 3000000)", err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&fx), 0);
	d = decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"max_tokens\":1000}");
	decision_estimate(&d, &(struct decision_request){ .body_size = 400 }, 4096);
	CHECK_EQ_INT(d.est_card.micros[PRICE_INPUT], 100);
	CHECK_EQ_INT(d.est_cost_micros, 2);   /* each part rounded up */
	decision_estimate(&d, &(struct decision_request){ .body_size = 401 }, 4096);
	CHECK_EQ_INT(d.est_card.micros[PRICE_INPUT], 1000000);
	/* 101 x $1 + 1000 x $3 per Mtok, rounded up. */
	CHECK_EQ_INT(d.est_cost_micros, 3101);
	CHECK_EQ_INT(db_exec(fx.db, "DELETE FROM model_prices WHERE above_tokens = 100", err,
	                     sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&fx), 0);
	/* The key's own list: priority is priced but not on it. */
	d = decide_with("Bearer " FIX_KEY_NODEFAULT, NULL, CHAT,
	                "{\"model\":\"gpt-a\",\"service_tier\":\"priority\"}", 0);
	CHECK_EQ_INT(d.verdict, DECISION_COST_POLICY);
	/* The agent's list for keys without one. */
	pol.service_tiers = "flex";
	fix_policy = &pol;
	CHECK_EQ_INT(costly("gpt-a", CHAT, ""), DECISION_COST_POLICY);
	pol.service_tiers = "default,priority";
	CHECK_EQ_INT(costly("gpt-a", CHAT, ",\"service_tier\":\"priority\""), DECISION_ALLOW);
	/* Server tools: an Anthropic web search where its card prices one. */
	CHECK_EQ_INT(costly("claude-a", "/v1/messages", web), DECISION_COST_POLICY);
	/* Counting tokens bills nothing, whatever the body names. */
	CHECK_EQ_INT(costly("claude-a", "/v1/messages/count_tokens", web), DECISION_ALLOW);
	CHECK_EQ_INT(costly("claude-a", "/v1/messages", priority_web), DECISION_ALLOW);
	/* Client tools are no matter; other server tools and ambiguous types are. */
	CHECK_EQ_INT(costly("gpt-a", CHAT, ",\"tools\":[{\"type\":\"function\",\"function\":{}}]"),
	             DECISION_ALLOW);
	CHECK_EQ_INT(costly("claude-a", "/v1/messages", ",\"tools\":[{\"type\":\"bash_20250124\"},"
	                    "{\"name\":\"x\"}]"), DECISION_ALLOW);
	CHECK_EQ_INT(costly("gpt-a", "/v1/responses", ",\"tools\":[{\"type\":\"web_search\"}]"),
	             DECISION_COST_POLICY);
	CHECK_EQ_INT(costly("gpt-a", CHAT, ",\"tools\":[{\"type\":\"function\",\"Type\":\"mcp\"}]"),
	             DECISION_COST_POLICY);
	CHECK_EQ_INT(costly("gpt-a", CHAT, ",\"tools\":[{\"type\":\"function\",\"type\":\"function\"}]"),
	             DECISION_COST_POLICY);
	CHECK_EQ_INT(costly("gpt-a", CHAT, ",\"tools\":[\"code_interpreter\"]"), DECISION_COST_POLICY);
	CHECK_EQ_INT(costly("gpt-a", CHAT, ",\"web_search_options\":{}"), DECISION_COST_POLICY);
	CHECK_EQ_INT(costly("gpt-a", CHAT, ",\"web_search_options\":null"), DECISION_ALLOW);
	d = decide(FIX_KEY_OPEN, "{\"model\":\"claude-a\",\"mcp_servers\":[]}");
	CHECK_EQ_INT(d.verdict, DECISION_WRONG_API);
	CHECK_EQ_INT(costly("claude-a", "/v1/messages", ",\"mcp_servers\":[{}]"), DECISION_COST_POLICY);
	/* allow lets them through, deny refuses even a priced one. */
	pol.server_tools = KT_POLICY_ALLOW;
	CHECK_EQ_INT(costly("gpt-a", "/v1/responses", ",\"tools\":[{\"type\":\"file_search\"}]"),
	             DECISION_ALLOW);
	pol.server_tools = KT_POLICY_DENY;
	CHECK_EQ_INT(costly("claude-a", "/v1/messages", priority_web), DECISION_COST_POLICY);
	pol.server_tools = KT_POLICY_PRICED;
	/* Audio output: priced on gpt-a's priority card only. */
	CHECK_EQ_INT(costly("gpt-a", CHAT, ",\"modalities\":[\"text\",\"audio\"]"), DECISION_COST_POLICY);
	CHECK_EQ_INT(costly("gpt-a", CHAT, ",\"modalities\":[\"text\",\"au\\u0064io\"]"),
	             DECISION_COST_POLICY);
	CHECK_EQ_INT(costly("gpt-a", CHAT, ",\"audio\":{\"voice\":\"alloy\"}"), DECISION_COST_POLICY);
	CHECK_EQ_INT(costly("gpt-a", CHAT, ",\"service_tier\":\"priority\",\"modalities\":[\"audio\"],"
	                    "\"audio\":{}"), DECISION_ALLOW);
	CHECK_EQ_INT(costly("gpt-a", CHAT, ",\"modalities\":[\"text\"]"), DECISION_ALLOW);
	/* Audio input: no card of gpt-a prices it, so refused under priced, even on the
	 * priority card that prices audio output. */
	CHECK_EQ_INT(costly("gpt-a", CHAT, ",\"messages\":[{\"role\":\"user\",\"content\":"
	                    "[{\"type\":\"input_audio\",\"input_audio\":{}}]}]"),
	             DECISION_COST_POLICY);
	d = decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"service_tier\":\"priority\","
	           "\"messages\":[{\"content\":[{\"type\":\"input_audio\"}]}]}");
	CHECK(d.verdict == DECISION_COST_POLICY && d.costly == DECISION_COSTLY_AUDIO);
	CHECK_EQ_INT(db_exec(fx.db, "UPDATE model_prices SET audio_input_micros_per_mtok = 5000"
	                            " WHERE model_id = 1 AND tier = 'priority'", err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&fx), 0);
	d = decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"service_tier\":\"priority\","
	           "\"messages\":[{\"content\":[{\"type\":\"input_audio\"}]}]}");
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	pol.audio = KT_POLICY_ALLOW;
	CHECK_EQ_INT(costly("gpt-a", CHAT, ",\"messages\":[{\"content\":[{\"type\":\"input_audio\"}]}]"),
	             DECISION_ALLOW);
	CHECK_EQ_INT(costly("gpt-a", CHAT, ",\"audio\":{}"), DECISION_ALLOW);
	/* A key's own policy wins over the agent's. */
	CHECK_EQ_INT(db_exec(fx.db, "UPDATE keys SET audio = 'deny' WHERE id = 1", err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&fx), 0);
	CHECK_EQ_INT(costly("gpt-a", CHAT, ",\"audio\":{}"), DECISION_COST_POLICY);
	/* A cut body: what the capture filter refuses past the cut. */
	pol = (struct decision_policy){ NULL, KT_POLICY_PRICED, KT_POLICY_PRICED, KT_POLICY_PRICED, 0 };
	CHECK_EQ_INT(db_exec(fx.db, "UPDATE keys SET audio = NULL WHERE id = 1", err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&fx), 0);
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, CHAT, "{\"model\":\"gpt-a\",\"messages\":[", 1);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK_EQ_STR(d.costly_scan, "owa");
	CHECK_EQ_STR(d.tiers_scan, "default\nauto\nstandard\nstandard_only\npriority\n");
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, CHAT,
	                "{\"model\":\"gpt-a\",\"service_tier\":\"priority\",\"messages\":[", 1);
	CHECK_EQ_STR(d.costly_scan, "o");
	CHECK(d.count_searches && d.capture);
	/* OpenAI's web searches, priced on gpt-a's priority card, are counted by the capture
	 * filter: the answer goes there even when json_query could read it. */
	d = decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"max_tokens\":8,\"service_tier\":\"priority\","
	                         "\"tools\":[{\"type\":\"web_search_preview\"}]}");
	CHECK(d.verdict == DECISION_ALLOW && d.count_searches && d.capture);
	d = decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"max_tokens\":8}");
	CHECK(d.verdict == DECISION_ALLOW && !d.count_searches && !d.capture);
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/messages",
	                "{\"model\":\"claude-a\",\"service_tier\":\"priority\",\"messages\":[", 1);
	CHECK_EQ_STR(d.costly_scan, "oa");
	pol.service_tiers = "priority";
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/messages",
	                "{\"model\":\"claude-a\",\"service_tier\":\"priority\",\"messages\":[", 1);
	CHECK_EQ_STR(d.tiers_scan, "priority\n");
	pol = (struct decision_policy){ NULL, KT_POLICY_ALLOW, KT_POLICY_ALLOW, KT_POLICY_PRICED, 0 };
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, CHAT, "{\"model\":\"gpt-a\",\"messages\":[", 1);
	CHECK_EQ_STR(d.costly_scan, "");
	/* A body seen whole needs none of it. */
	pol.server_tools = KT_POLICY_DENY;
	d = decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\"}");
	CHECK(d.verdict == DECISION_ALLOW && !d.costly_scan[0] && !d.tiers_scan[0]);
	/* A model without any price stays as it was: its rows are unpriced. */
	CHECK_EQ_INT(db_exec(fx.db, "DELETE FROM model_prices WHERE model_id = 3;"
	                            "UPDATE keys SET audio = NULL", err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&fx), 0);
	pol = (struct decision_policy){ NULL, KT_POLICY_PRICED, KT_POLICY_PRICED, KT_POLICY_PRICED, 0 };
	CHECK_EQ_INT(costly("claude-a", "/v1/messages", web), DECISION_ALLOW);
	CHECK_EQ_INT(costly("claude-a", "/v1/messages", ",\"service_tier\":\"flex\""), DECISION_ALLOW);
	/* Its tiers past the cut: the list's, none priced. */
	pol.service_tiers = "default,priority";
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/messages",
	                "{\"model\":\"claude-a\",\"messages\":[", 1);
	CHECK_EQ_STR(d.tiers_scan, "default\nauto\nstandard\nstandard_only\npriority\n");
	CHECK_EQ_STR(d.costly_scan, "");
	fix_policy = NULL;
}

static void test_reload_sees_changes(void)
{
	char err[256];

	CHECK_EQ_INT(db_exec(fx.db, "UPDATE keys SET revoked_at = 5 WHERE name = 'open'", err,
	                     sizeof(err)), 0);
	CHECK_EQ_INT(decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\"}").verdict, DECISION_ALLOW);
	CHECK_EQ_INT(fixture_reload(&fx), 0);
	CHECK_EQ_INT(decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\"}").verdict, DECISION_REVOKED_KEY);
	CHECK(fx.kt->generation > 0);
}

static void test_many_keys_all_found(void)
{
	char key[64], name[32];
	int i, found = 0;

	for (i = 0; i < 2000; i++) {
		snprintf(key, sizeof(key), "tly_bulk%039d", i);
		snprintf(name, sizeof(name), "bulk-%d", i);
		if (fixture_add_key(&fx, 100 + i, name, key, "gpt-a", 0) < 0)
			break;
	}
	CHECK_EQ_INT(fixture_reload(&fx), 0);
	for (i = 0; i < 2000; i++) {
		const struct kt_key *k;

		snprintf(key, sizeof(key), "tly_bulk%039d", i);
		k = keytable_find_key(fx.kt, key, strlen(key));
		found += k && k->id == 100 + i;
	}
	CHECK_EQ_INT(found, 2000);
	CHECK(fx.kt->nslots >= 2 * fx.kt->nkeys);
}

static struct decision decide_stored(const char *key, const char *path)
{
	char auth[128];

	snprintf(auth, sizeof(auth), "Bearer %s", key);
	return decide_with(auth, NULL, path, "", 0);
}

/* Sets key id's end-user policy and reloads the keytable. */
static void set_end_users(int id, const char *policy)
{
	char sql[128], err[256];

	snprintf(sql, sizeof(sql), "UPDATE keys SET end_users = '%s' WHERE id = %d", policy, id);
	CHECK_EQ_INT(db_exec(fx.db, sql, err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&fx), 0);
}

/* d's error body, as OpenAI's clients get it, in msg. */
static void error_of(const struct decision *d, char *msg, size_t cap)
{
	struct decision_request req = { 0 };

	req.path.ptr = CHAT;
	req.path.len = strlen(CHAT);
	CHECK(wording_error_json(d, &req, msg, cap) > 0);
}

/* The header, with its count. */
static struct decision decide_user(const char *key, const char *path, const char *body,
                                   const char *header, int64_t headers, int truncated)
{
	char auth[128];
	struct decision d;

	snprintf(auth, sizeof(auth), "Bearer %s", key);
	fix_end_user = header;
	fix_end_users = headers;
	d = decide_with(auth, NULL, path, body, truncated);
	fix_end_user = NULL;
	fix_end_users = 0;
	return d;
}

static void test_end_users(void)
{
	char body[512], msg[1024];
	struct decision d;
	struct acct_row row;

	/* Optional (every key's default): the header, else the body's member of the API. */
	d = decide_user(FIX_KEY_OPEN, CHAT, "{\"user\":\"u-body\"}", NULL, 0, 0);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK_EQ_STR(d.end_user, "u-body");
	join_decided(&d, "r1", 2, 1, &row);
	CHECK_EQ_STR(row.end_user, "u-body");
	d = decide_user(FIX_KEY_OPEN, CHAT, "{\"user\":\"u-body\",\"safety_identifier\":\"s\"}",
	                "u-head", 1, 0);
	CHECK_EQ_STR(d.end_user, "u-head");
	d = decide_user(FIX_KEY_OPEN, CHAT, "{\"user\":5}", "u-head", 1, 0);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK_EQ_STR(d.end_user, "u-head");
	d = decide_user(FIX_KEY_OPEN, CHAT, "{}", NULL, 0, 0);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK_EQ_STR(d.end_user, "");
	/* Anthropic's member on its endpoint; OpenAI's there is the client's own member. */
	d = decide_user(FIX_KEY_OPEN, "/v1/messages",
	                "{\"model\":\"claude-a\",\"user\":\"x\",\"metadata\":{\"user_id\":\"a-1\"}}",
	                NULL, 0, 0);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK_EQ_STR(d.end_user, "a-1");
	d = decide_user(FIX_KEY_OPEN, CHAT, "{\"metadata\":{\"user_id\":\"a-1\"}}", NULL, 0, 0);
	CHECK_EQ_STR(d.end_user, "");
	/* Bad ids: twice, too long, a control character, invalid UTF-8, two headers. */
	d = decide_user(FIX_KEY_OPEN, CHAT, "{\"user\":\"a\",\"user\":\"b\"}", NULL, 0, 0);
	CHECK_EQ_INT(d.verdict, DECISION_BAD_END_USER);
	CHECK_EQ_INT(decision_http_status(d.verdict), 400);
	CHECK_EQ_STR(decision_verdict_name(d.verdict), "invalid_end_user");
	error_of(&d, msg, sizeof(msg));
	CHECK(strstr(msg, "safety_identifier or user") != NULL);
	memset(body, 'u', 257);
	body[257] = '\0';
	CHECK_EQ_INT(decide_user(FIX_KEY_OPEN, CHAT, "{}", body, 1, 0).verdict, DECISION_BAD_END_USER);
	body[256] = '\0';
	CHECK_EQ_INT(decide_user(FIX_KEY_OPEN, CHAT, "{}", body, 1, 0).verdict, DECISION_ALLOW);
	CHECK_EQ_INT(decide_user(FIX_KEY_OPEN, CHAT, "{}", "a\tb", 1, 0).verdict, DECISION_BAD_END_USER);
	CHECK_EQ_INT(decide_user(FIX_KEY_OPEN, CHAT, "{}", "\xff", 1, 0).verdict, DECISION_BAD_END_USER);
	d = decide_user(FIX_KEY_OPEN, CHAT, "{}", "a", 2, 0);
	CHECK_EQ_INT(d.verdict, DECISION_BAD_END_USER);
	error_of(&d, msg, sizeof(msg));
	CHECK(strstr(msg, "X-Tally-User") != NULL);
	CHECK_EQ_INT(decide_user(FIX_KEY_OPEN, CHAT, "{}", "", 1, 0).verdict, DECISION_BAD_END_USER);

	/* Required: none named is refused, and so is a body cut before the member. */
	set_end_users(1, "required");
	d = decide_user(FIX_KEY_OPEN, CHAT, "{\"model\":\"gpt-a\"}", NULL, 0, 0);
	CHECK_EQ_INT(d.verdict, DECISION_END_USER_REQUIRED);
	CHECK_EQ_STR(decision_verdict_name(d.verdict), "end_user_required");
	d = decide_user(FIX_KEY_OPEN, CHAT, "{\"model\":\"gpt-a\",\"messages\":[", NULL, 0, 1);
	CHECK_EQ_INT(d.verdict, DECISION_END_USER_REQUIRED);
	error_of(&d, msg, sizeof(msg));
	CHECK(strstr(msg, "X-Tally-User") != NULL && strstr(msg, "inspects") != NULL);
	CHECK_EQ_INT(decide_user(FIX_KEY_OPEN, CHAT, "{\"model\":\"gpt-a\",\"messages\":[",
	                         "h", 1, 1).verdict, DECISION_ALLOW);
	CHECK_EQ_INT(decide_user(FIX_KEY_OPEN, CHAT, "{\"user\":\"u\"}", NULL, 0, 0).verdict,
	             DECISION_ALLOW);
	CHECK_EQ_INT(decide_user(FIX_KEY_OPEN, CHAT, "{\"user\":null}", NULL, 0, 0).verdict,
	             DECISION_END_USER_REQUIRED);
	/* Not an inference request: nothing to attribute. */
	CHECK_EQ_INT(decide_user(FIX_KEY_OPEN, "GET /v1/models", "", NULL, 0, 0).verdict,
	             DECISION_MODELS_LISTED);

	/* Forbidden: any naming is refused, a bad one too, header or body. */
	set_end_users(1, "forbidden");
	CHECK_EQ_INT(decide_user(FIX_KEY_OPEN, CHAT, "{}", NULL, 0, 0).verdict, DECISION_ALLOW);
	d = decide_user(FIX_KEY_OPEN, CHAT, "{}", "spoofed", 1, 0);
	CHECK_EQ_INT(d.verdict, DECISION_END_USER_FORBIDDEN);
	CHECK_EQ_STR(decision_verdict_name(d.verdict), "end_user_forbidden");
	CHECK_EQ_INT(decide_user(FIX_KEY_OPEN, CHAT, "{\"user\":\"u\"}", NULL, 0, 0).verdict,
	             DECISION_END_USER_FORBIDDEN);
	CHECK_EQ_INT(decide_user(FIX_KEY_OPEN, CHAT, "{\"user\":7}", NULL, 0, 0).verdict,
	             DECISION_END_USER_FORBIDDEN);
	CHECK_EQ_INT(decide_user(FIX_KEY_OPEN, CHAT, "{\"user\":null}", NULL, 0, 0).verdict,
	             DECISION_ALLOW);
	set_end_users(1, "optional");
}

/* The X-Tally-Tags header sent headers times. */
static struct decision decide_tags(const char *header, int64_t headers)
{
	struct decision d;

	fix_tags = header;
	fix_tags_headers = headers;
	d = decide_user(FIX_KEY_OPEN, CHAT, "{}", NULL, 0, 0);
	fix_tags = NULL;
	fix_tags_headers = 0;
	return d;
}

static void sql_reload(const char *sql)
{
	char err[256];

	CHECK_EQ_INT(db_exec(fx.db, sql, err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&fx), 0);
}

/* A request's tags: the header's in canonical order, with its key's and its team's
 * fixed tags, which it may repeat but not change; malformed ones are refused. */
static void test_tags(void)
{
	char msg[1024], big[TAGS_HEADER_MAX + 2];
	struct decision d;
	struct acct_row row;

	d = decide_tags(" feature=search, env=prod", 1);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK_EQ_STR(d.tags, "env=prod,feature=search");
	join_decided(&d, "r1", 2, 1, &row);
	CHECK_EQ_STR(row.tags, "env=prod,feature=search");
	CHECK_EQ_STR(decide_tags(NULL, 0).tags, "");
	/* Malformed, twice, too many, too long: 400 invalid_tags, nothing kept. */
	d = decide_tags("env=prod,", 1);
	CHECK_EQ_INT(d.verdict, DECISION_BAD_TAGS);
	CHECK_EQ_INT(decision_http_status(d.verdict), 400);
	CHECK_EQ_STR(decision_verdict_name(d.verdict), "invalid_tags");
	CHECK_EQ_STR(d.tags, "");
	error_of(&d, msg, sizeof(msg));
	CHECK(strstr(msg, "X-Tally-Tags") != NULL && strstr(msg, "name=value") != NULL);
	CHECK_EQ_INT(decide_tags("env=prod", 2).verdict, DECISION_BAD_TAGS);
	CHECK_EQ_INT(decide_tags("env=prod,env=dev", 1).verdict, DECISION_BAD_TAGS);
	CHECK_EQ_INT(decide_tags("a=1,b=2,c=3,d=4,e=5,f=6,g=7,h=8,i=9", 1).verdict, DECISION_BAD_TAGS);
	CHECK_EQ_INT(decide_tags("env=\"prod\"", 1).verdict, DECISION_BAD_TAGS);
	memset(big, ' ', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	memcpy(big, "env=prod", 8);
	CHECK_EQ_INT(decide_tags(big, 1).verdict, DECISION_BAD_TAGS);   /* cut by HAProxy */
	big[TAGS_HEADER_MAX] = '\0';
	CHECK_EQ_INT(decide_tags(big, 1).verdict, DECISION_ALLOW);
	/* The key's fixed tags: added, repeated alike, never changed. */
	sql_reload("UPDATE keys SET tags = 'env=prod,owner=search' WHERE id = 1");
	d = decide_tags("feature=chat", 1);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK_EQ_STR(d.tags, "env=prod,feature=chat,owner=search");
	CHECK_EQ_STR(decide_tags(NULL, 0).tags, "env=prod,owner=search");
	CHECK_EQ_STR(decide_tags("env=prod", 1).tags, "env=prod,owner=search");
	d = decide_tags("env=dev", 1);
	CHECK_EQ_INT(d.verdict, DECISION_TAG_CONFLICT);
	CHECK_EQ_STR(decision_verdict_name(d.verdict), "tag_conflict");
	CHECK_EQ_INT(decision_http_status(d.verdict), 400);
	/* ... nor pushed past the bound. */
	CHECK_EQ_INT(decide_tags("a=1,b=2,c=3,d=4,f=6,g=7,h=8", 1).verdict, DECISION_BAD_TAGS);
	/* A team's fixed tags hold for its keys, over theirs. */
	sql_reload("INSERT INTO teams (id, name, created_at, tags) VALUES (7, 'tagged', 1,"
	           " 'env=staging,project=atlas'); UPDATE keys SET team_id = 7 WHERE id = 1");
	CHECK_EQ_STR(decide_tags(NULL, 0).tags, "env=staging,owner=search,project=atlas");
	CHECK_EQ_INT(decide_tags("project=other", 1).verdict, DECISION_TAG_CONFLICT);
	CHECK_EQ_INT(decide_tags("env=prod", 1).verdict, DECISION_TAG_CONFLICT);
	/* Together more than a request may carry: refused, none left out of its row. */
	sql_reload("UPDATE teams SET tags = 'a=1,b=2,c=3,d=4,e=5,f=6,g=7'");
	d = decide_tags(NULL, 0);
	CHECK_EQ_INT(d.verdict, DECISION_BAD_TAGS);
	error_of(&d, msg, sizeof(msg));
	CHECK(strstr(msg, "at most 8 tags") != NULL);
	sql_reload("UPDATE keys SET team_id = NULL, tags = NULL WHERE id = 1; DELETE FROM teams");
	CHECK_EQ_STR(decide_tags(NULL, 0).tags, "");
	/* The tags with a budget, in tag order, for the caller to reserve at; only a key
	 * that fixes such a tag (or whose team does) may carry it. */
	sql_reload("INSERT INTO tag_budgets (id, tag, created_at, budget_micros, budget_period)"
	           " VALUES (3, 'project=atlas', 1, 500000000, 'month'),"
	           " (4, 'env=prod', 1, 1000, 'day'), (5, 'env=pro', 1, 1, 'day')");
	d = decide_tags("project=atlas", 1);
	CHECK_EQ_INT(d.verdict, DECISION_TAG_NOT_ALLOWED);
	CHECK_EQ_STR(decision_verdict_name(d.verdict), "tag_not_allowed");
	CHECK_EQ_INT(decision_http_status(d.verdict), 403);
	error_of(&d, msg, sizeof(msg));
	CHECK(strstr(msg, "project=atlas") != NULL && strstr(msg, "budget") != NULL);
	CHECK_EQ_INT(decide_tags("feature=x", 1).verdict, DECISION_ALLOW);
	sql_reload("UPDATE keys SET tags = 'project=atlas' WHERE id = 1;"
	           " INSERT INTO teams (id, name, created_at, tags) VALUES (8, 'p', 1, 'env=prod');"
	           " UPDATE keys SET team_id = 8 WHERE id = 1");
	CHECK_EQ_INT(decide_tags(NULL, 0).ntag_budgets, 2);
	CHECK_EQ_INT(decide_tags("env=pro", 1).verdict, DECISION_TAG_CONFLICT);
	d = decide_tags("project=atlas,feature=x,env=prod", 1);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK_EQ_INT(d.ntag_budgets, 2);
	CHECK_EQ_STR(d.tag_budgets[0]->tag, "env=prod");
	CHECK_EQ_INT(d.tag_budgets[0]->quota.budget_micros, 1000);
	CHECK(d.tag_budgets[0]->quota.period == QUOTA_PERIOD_DAY);
	CHECK_EQ_STR(d.tag_budgets[1]->tag, "project=atlas");
	CHECK_EQ_INT(d.tag_budgets[1]->id, 3);
	sql_reload("UPDATE keys SET team_id = NULL, tags = NULL WHERE id = 1; DELETE FROM teams");
	CHECK_EQ_INT(decide_tags("env=prodx,project=atlasx", 1).ntag_budgets, 0);
	CHECK_EQ_INT(decide_tags(NULL, 0).ntag_budgets, 0);
	sql_reload("DELETE FROM tag_budgets");
}

/* The gateway's own path: GET /tally/v1/usage and its end users' pages only, after the key's checks; nothing
 * else under /tally/ is an endpoint, and nothing of it is forwarded or estimated. */
/* A page of end users asked for with query q. */
static struct decision decide_page(const char *q)
{
	struct decision d;

	fix_query = q;
	d = decide_stored(FIX_KEY_OPEN, "GET /tally/v1/usage/end_users");
	fix_query = NULL;
	return d;
}

/* GET /tally/v1/usage/end_users: its query's limit and after, strictly; its body pages
 * as the room allows and says where the next page begins. */
static void test_end_users_page(void)
{
	struct usageview_end_user eu[3] = { { "a \"q\"", 2, 30 }, { "b\xe2\x80\xa8", 1, 5 },
	                                    { "c+d/\xc3\xa9", 4, 0 } };
	struct wording_usage_level l;
	char buf[4096], q[1100];
	struct decision d;
	int n;

	d = decide_page(NULL);
	CHECK_EQ_INT(d.verdict, DECISION_USAGE_REPORTED);
	CHECK(d.end_users_page && d.page_limit == DECISION_PAGE_DEFAULT && !d.page_after[0]);
	CHECK(!decide_stored(FIX_KEY_OPEN, "GET /tally/v1/usage").end_users_page);
	d = decide_page("limit=2&after=a%2Bb%20c%C3%A9&x=1");
	CHECK_EQ_INT(d.verdict, DECISION_USAGE_REPORTED);
	CHECK_EQ_INT(d.page_limit, 2);
	CHECK_EQ_STR(d.page_after, "a+b c\xc3\xa9");
	CHECK_EQ_INT(decide_page("after=&limit=100").verdict, DECISION_USAGE_REPORTED);
	static const char *const bad[] = { "limit=0", "limit=101", "limit=", "limit=1x",
	                                   "limit=-1", "limit=1&limit=2", "after=%ZZ",
	                                   "after=%4", "after=%0a", "after=%ff", "after=a&after=b",
	                                   "limit=99999999999999999999" };
	size_t i;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		d = decide_page(bad[i]);
		CHECK_EQ_INT(d.verdict, DECISION_BAD_QUERY);
		CHECK_EQ_INT(decision_http_status(d.verdict), 400);
	}
	memset(q, 'x', sizeof(q) - 1);
	q[sizeof(q) - 1] = '\0';
	memcpy(q, "after=", 6);
	q[DECISION_QUERY_MAX + 1] = '\0';
	CHECK_EQ_INT(decide_page(q).verdict, DECISION_BAD_QUERY);
	CHECK_EQ_STR(decision_verdict_name(DECISION_BAD_QUERY), "invalid_query");

	/* The body: ids escaped for JSON, the next page's after percent-encoded. */
	d = decide_page("limit=3");
	memset(&l, 0, sizeof(l));
	l.period = QUOTA_PERIOD_MONTH;
	l.since_ms = 1764547200000LL;
	l.until_ms = 1767225600000LL;
	l.as_of_ms = 1765000000000LL;
	n = wording_end_users_json(&d, &l, eu, 3, NULL, buf, sizeof(buf));
	CHECK(n > 0 && (size_t)n == strlen(buf));
	CHECK(strstr(buf, "\"period\":{\"kind\":\"month\",\"time_zone\":\"UTC\",\"start\":\"2025-12-01T00:00:00Z\"") != NULL);
	CHECK(strstr(buf, "\"data\":[{\"end_user\":\"a \\\"q\\\"\",\"requests\":2,\"spent_micros\":30},"
	                  "{\"end_user\":\"b\\u2028\",") != NULL);
	CHECK(strstr(buf, "\"end_user\":\"c+d/\xc3\xa9\"") != NULL);
	CHECK(strstr(buf, "\"has_more\":false,\"next\":null}") != NULL);
	n = wording_end_users_json(&d, &l, eu, 2, "", buf, sizeof(buf));
	CHECK(n > 0 && strstr(buf, "\"has_more\":true,\"next\":\"/tally/v1/usage/end_users?limit=3&"
	                               "after=b%E2%80%A8\"}") != NULL);
	/* A room for one end user: the page holds one, and the next begins after it. */
	n = wording_end_users_json(&d, &l, eu, 3, NULL, buf, (size_t)strstr(buf, ",{") - (size_t)buf + 1030);
	CHECK(n > 0 && strstr(buf, "\"b") == NULL);
	CHECK(strstr(buf, "\"has_more\":true,\"next\":\"/tally/v1/usage/end_users?limit=3&"
	                  "after=a%20%22q%22\"}") != NULL);
	CHECK_EQ_INT(wording_end_users_json(&d, &l, eu, 3, NULL, buf, 300), -1);
	/* The page's reading stopped past its last end user: the next begins there. */
	n = wording_end_users_json(&d, &l, eu, 1, "zz", buf, sizeof(buf));
	CHECK(n > 0 && strstr(buf, "after=zz\"}") != NULL);
	n = wording_end_users_json(&d, &l, eu, 0, "zz", buf, sizeof(buf));
	CHECK(n > 0 && strstr(buf, "\"data\":[],\"has_more\":true") != NULL);
}

static void test_usage_path(void)
{
	struct decision d = decide_stored(FIX_KEY_OPEN, "GET /tally/v1/usage");
	char buf[4096];
	struct wording_usage u;
	int n;

	CHECK_EQ_INT(d.verdict, DECISION_USAGE_REPORTED);
	CHECK_EQ_INT(decision_http_status(d.verdict), 200);
	CHECK(d.key && !d.model && !d.capture);
	CHECK_EQ_INT(decide_stored(FIX_KEY_OPEN, "/tally/v1/usage").verdict, DECISION_BAD_ENDPOINT);
	CHECK_EQ_INT(decide_stored(FIX_KEY_OPEN, "GET /tally/v1/usage/").verdict, DECISION_BAD_ENDPOINT);
	CHECK_EQ_INT(decide_stored(FIX_KEY_OPEN, "GET /tally/v1/usage/2").verdict, DECISION_BAD_ENDPOINT);
	CHECK_EQ_INT(decide_stored(FIX_KEY_OPEN, "GET /tally/v1/keys").verdict, DECISION_BAD_ENDPOINT);
	CHECK_EQ_INT(decide_stored(FIX_KEY_OPEN, "DELETE /tally/v1/usage").verdict,
	             DECISION_BAD_ENDPOINT);
	CHECK_EQ_INT(decide_stored(FIX_KEY_REVOKED, "GET /tally/v1/usage").verdict,
	             DECISION_REVOKED_KEY);
	CHECK_EQ_INT(decide_with(NULL, NULL, "GET /tally/v1/usage", "", 0).verdict, DECISION_NO_KEY);
	CHECK_EQ_INT(decide_stored("tly_nobody00000000000000000000000000000000000000",
	                           "GET /tally/v1/usage").verdict, DECISION_UNKNOWN_KEY);
	CHECK_EQ_STR(decision_verdict_name(DECISION_USAGE_REPORTED), "usage_reported");
	CHECK_EQ_INT(decision_http_status(DECISION_USAGE_UNAVAILABLE), 503);

	/* The body: the key's period, spend, budget left and windows; no team. */
	memset(&u, 0, sizeof(u));
	u.key.cfg.budget_micros = 500000;
	u.key.cfg.rpm = 60;
	u.key.period = QUOTA_PERIOD_MONTH;
	u.key.since_ms = 1764547200000LL;           /* 2025-12-01 */
	u.key.until_ms = 1767225600000LL;           /* 2026-01-01 */
	u.key.spent_micros = 600000;                /* past the budget: none left, not < 0 */
	u.key.as_of_ms = 1765000000000LL;
	u.key.st = (struct quota_status){ 60, 59, 1000, -1, -1, -1, 0 };
	n = wording_usage_json(&d, &u, buf, sizeof(buf));
	CHECK(n > 0 && (size_t)n == strlen(buf));
	CHECK(strstr(buf, "\"period\":{\"kind\":\"month\",\"time_zone\":\"UTC\",\"start\":\"2025-12-01T00:00:00Z\","
	                  "\"end\":\"2026-01-01T00:00:00Z\"}") != NULL);
	CHECK(strstr(buf, "\"spent_micros\":600000,") != NULL);
	CHECK(strstr(buf, "\"budget_micros\":500000,\"budget_left_micros\":0,") != NULL);
	CHECK(strstr(buf, "\"requests_per_minute\":{\"limit\":60,\"remaining\":59,\"reset_ms\":1000}") != NULL);
	CHECK(strstr(buf, "\"tokens_per_minute\":null,\"concurrency\":null") != NULL);
	CHECK(strstr(buf, "\"team\":null}") != NULL);
	CHECK(strstr(buf, "\"prefix\":\"") != NULL);
	/* A total budget has no period's bounds. */
	u.key.period = QUOTA_PERIOD_TOTAL;
	u.key.since_ms = 0;
	u.key.until_ms = INT64_MAX;
	CHECK(wording_usage_json(&d, &u, buf, sizeof(buf)) > 0);
	CHECK(strstr(buf, "{\"kind\":\"total\",\"time_zone\":\"UTC\",\"start\":null,\"end\":null}") != NULL);
	CHECK_EQ_INT(wording_usage_json(&d, &u, buf, 100), -1);

	/* Budgets per model: each with its own period. The longest answer (16 for the key
	 * and 16 for its team, names as long as tallyctl takes them, every figure at its
	 * widest) fits the room an ACK has for it. */
	{
		static char big[SESSION_BODY_MAX];
		struct kt_model_budget mb[MODELBUDGET_PER_OWNER_MAX];
		char names[MODELBUDGET_PER_OWNER_MAX][ACCT_NAME_MAX + 1];
		char key_name[65], team_name[65];
		struct kt_team team = { .id = 1, .name = team_name };
		struct kt_key k = *d.key;
		size_t i;

		memset(key_name, 'k', 64);
		key_name[64] = '\0';
		memset(team_name, 't', 64);
		team_name[64] = '\0';
		k.name = key_name;
		k.team = &team;
		d.key = &k;
		for (i = 0; i < MODELBUDGET_PER_OWNER_MAX; i++) {
			memset(names[i], 'm', ACCT_NAME_MAX);
			names[i][ACCT_NAME_MAX] = '\0';
			mb[i] = (struct kt_model_budget){ .id = 1, .model = names[i],
			                                  .quota = { .budget_micros = INT64_MAX,
			                                             .period = QUOTA_PERIOD_WEEK } };
			u.key.models[i] = (struct wording_usage_model){ &mb[i], 1765000000000LL,
			                                                1765600000000LL, INT64_MAX,
			                                                1765000000000LL };
		}
		u.key.nmodels = MODELBUDGET_PER_OWNER_MAX;
		u.key.cfg = (struct quota_cfg){ INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX,
		                                QUOTA_PERIOD_MONTH, NULL, 0 };
		u.key.st = (struct quota_status){ INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX,
		                                  INT64_MAX, INT64_MAX, 0 };
		u.key.spent_micros = INT64_MAX;
		u.team = u.key;
		u.team_shown = 1;
		n = wording_usage_json(&d, &u, big, sizeof(big));
		CHECK(n > 0 && (size_t)n < sizeof(big));
		CHECK(strstr(big, "\"budget_left_micros\":0}") != NULL);
		u.key.nmodels = 1;
		u.team.nmodels = 0;
		mb[0].model = "gpt-a";
		mb[0].quota.budget_micros = 700;
		u.key.models[0].spent_micros = 200;
		CHECK(wording_usage_json(&d, &u, buf, sizeof(buf)) > 0);
		CHECK(strstr(buf, "\"model_budgets\":[{\"model\":\"gpt-a\",\"period\":{\"kind\":"
		                  "\"week\",\"time_zone\":\"UTC\",\"start\":\"2025-12-06T05:46:40Z\",\"end\":"
		                  "\"2025-12-13T04:26:40Z\"},\"spent_micros\":200,\"spent_as_of\":"
		                  "\"2025-12-06T05:46:40Z\",\"budget_micros\":700,"
		                  "\"budget_left_micros\":500}]") != NULL);
		CHECK(strstr(buf, "\"model_budgets\":[]}}") != NULL);
	}
}

/* A stored response is reached only by the key that made it, on its own paths. */
static void test_stored_responses(void)
{
	static const char *const paths[] = {
		"GET /v1/responses/resp_a", "DELETE /v1/responses/resp_a",
		"/v1/responses/resp_a/cancel", "GET /v1/responses/resp_a/input_items",
	};
	static const char *const not_paths[] = {
		"/v1/responses/resp_a", "GET /v1/responses/resp_a/cancel",
		"DELETE /v1/responses/resp_a/input_items", "GET /v1/responses/",
		"GET /v1/responses//input_items", "GET /v1/responses/resp_a/input_items/x",
		"/v1/responses/resp_a/cancel/", "GET /v1/responses",
	};
	struct decision d;
	struct decision_request req = { 0 };
	char buf[2048];
	size_t i;

	fix_owners = owner_new(8);
	owner_put(fix_owners, "resp_a", 1, "gpt-a", 0);
	owner_put(fix_owners, "resp_gone", 1, "no-such-model", 0);
	for (i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		d = decide_stored(FIX_KEY_OPEN, paths[i]);
		CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
		CHECK_EQ_STR(d.model->name, "gpt-a");
		CHECK_EQ_STR(d.model->provider->backend, "be_oai");
		CHECK(d.unbilled && !d.capture && !d.creates_response && !d.wait);
		CHECK_EQ_STR(d.response_id, "resp_a");
		/* another key of the gateway: it does not exist */
		d = decide_stored(FIX_KEY_RESTRICTED, paths[i]);
		CHECK_EQ_INT(d.verdict, DECISION_UNKNOWN_RESPONSE);
		CHECK_EQ_INT(decision_http_status(d.verdict), 404);
		CHECK(d.model == NULL && !d.wait);
		d = decide_stored(FIX_KEY_REVOKED, paths[i]);
		CHECK_EQ_INT(d.verdict, DECISION_REVOKED_KEY);
	}
	for (i = 0; i < sizeof(not_paths) / sizeof(not_paths[0]); i++) {
		d = decide_stored(FIX_KEY_OPEN, not_paths[i]);
		CHECK_EQ_INT(d.verdict, DECISION_BAD_ENDPOINT);
	}
	d = decide_stored(FIX_KEY_OPEN, "GET /v1/responses/resp_gone");
	CHECK_EQ_INT(d.verdict, DECISION_NO_ROUTE);
	d = decide_stored(FIX_KEY_OPEN, "GET /v1/responses/resp_%2e%2e");
	CHECK_EQ_INT(d.verdict, DECISION_UNKNOWN_RESPONSE);
	/* an id no key made yet: the key's creates in flight ask HAProxy to wait */
	d = decide_stored(FIX_KEY_OPEN, "GET /v1/responses/resp_new");
	CHECK(d.verdict == DECISION_UNKNOWN_RESPONSE && !d.wait);
	owner_creating(fix_owners, 1, 1);
	d = decide_stored(FIX_KEY_OPEN, "GET /v1/responses/resp_new");
	CHECK(d.verdict == DECISION_UNKNOWN_RESPONSE && d.wait);
	d = decide_stored(FIX_KEY_OPEN, "GET /v1/responses/resp_a");
	CHECK(d.verdict == DECISION_ALLOW && !d.wait);
	owner_creating(fix_owners, 1, -1);
	/* the refusal names the id as sent, escaped */
	d = decide_stored(FIX_KEY_OPEN, "GET /v1/responses/re\"sp\\x");
	req.path = (struct spop_str){ "/v1/responses/re\"sp\\x", 22 };
	CHECK(wording_error_json(&d, &req, buf, sizeof(buf)) > 0);
	CHECK(strstr(buf, "\"code\":\"response_not_found\"") &&
	      strstr(buf, "No response found with id 're\\\"sp\\\\x'."));
	/* a create building on a stored response: the key's own, on its provider, in a body
	 * seen whole, in one plain member */
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/responses",
	                "{\"model\":\"gpt-a\",\"previous_response_id\":\"resp_a\"}", 0);
	CHECK(d.verdict == DECISION_ALLOW && d.creates_response && !d.unbilled);
	CHECK_EQ_INT(d.previous_tokens, 0);
	/* Its estimate counts the context the provider reads again: the stored response's
	 * reported tokens beside the body's bytes / 4 (100 bytes: 25). */
	owner_put(fix_owners, "resp_ctx", 1, "gpt-a", 50000);
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/responses",
	                "{\"model\":\"gpt-a\",\"previous_response_id\":\"resp_ctx\"}", 0);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK_EQ_INT(d.previous_tokens, 50000);
	decision_estimate(&d, &(struct decision_request){ .body_size = 100 }, 4096);
	CHECK_EQ_INT(d.est_prompt_tokens, 50025);
	CHECK_EQ_INT(d.est_tokens, 50025 + 4096);
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/responses/compact",
	                "{\"model\":\"gpt-a\",\"previous_response_id\":\"resp_a\"}", 0);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	d = decide_with("Bearer " FIX_KEY_NODEFAULT, NULL, "/v1/responses",
	                "{\"model\":\"gpt-a\",\"previous_response_id\":\"resp_a\"}", 0);
	CHECK(d.verdict == DECISION_UNKNOWN_RESPONSE && !d.wait);
	CHECK_EQ_STR(d.response_id, "resp_a");
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/responses",
	                "{\"model\":\"gpt-a\",\"previous_response_id\":\"resp_gone\"}", 0);
	CHECK_EQ_INT(d.verdict, DECISION_UNKNOWN_RESPONSE);
	{
		static const char *const refused[] = {
			"{\"model\":\"gpt-a\",\"previous_response_id\":\"resp_a\",\"conversation\":\"c\"}",
			"{\"model\":\"gpt-a\",\"previous_response_id\":\"resp_a\",\"previous_response_id\":\"resp_b\"}",
			"{\"model\":\"gpt-a\",\"previous_response_id\":\"resp_a\",\"Previous_Response_Id\":\"resp_b\"}",
			"{\"model\":\"gpt-a\",\"previous_response_id\":[\"resp_a\"]}",
			"{\"model\":\"gpt-a\",\"previous_response_id\":7}",
			"{\"model\":\"gpt-a\",\"previous_response_id\":\"\"}",
			"{\"model\":\"gpt-a\",\"previous_response_id\":\"resp a\"}",
			"{\"model\":\"gpt-a\",\"previous_response_id\":\"..\"}",
			"{\"model\":\"gpt-a\",\"background\":true}",
			"{\"model\":\"gpt-a\",\"request_id\":\"resp_a\"}",
		};

		for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
			d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/responses", refused[i], 0);
			CHECK_EQ_INT(d.verdict, DECISION_STORED_STATE);
		}
	}
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/responses",
	                "{\"model\":\"gpt-a\",\"previous_response_id\":\"resp_a\",\"input\":\"xx", 1);
	CHECK_EQ_INT(d.verdict, DECISION_STORED_STATE);
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/responses",
	                "{\"model\":\"gpt-a\",\"previous_response_id\":null}", 0);
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	/* the create: its answer's id will be the key's */
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/responses", "{\"model\":\"gpt-a\"}", 0);
	CHECK(d.verdict == DECISION_ALLOW && d.creates_response && !d.unbilled);
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/responses/compact",
	                "{\"model\":\"gpt-a\"}", 0);
	CHECK(d.verdict == DECISION_ALLOW && !d.creates_response);
	/* nothing stored, nothing to own (Codex CLI); unless some reader stores it */
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/responses",
	                "{\"model\":\"gpt-a\",\"store\":false}", 0);
	CHECK(d.verdict == DECISION_ALLOW && !d.creates_response);
	d = decide_with("Bearer " FIX_KEY_OPEN, NULL, "/v1/responses",
	                "{\"model\":\"gpt-a\",\"store\":false,\"Store\":true}", 0);
	CHECK(d.verdict == DECISION_ALLOW && d.creates_response);
	owner_free(fix_owners);
	fix_owners = NULL;
	d = decide_stored(FIX_KEY_OPEN, "GET /v1/responses/resp_a");
	CHECK(d.verdict == DECISION_UNKNOWN_RESPONSE && !d.wait);
}

/* An owner's answer, as the caller would have it from the store (decision reads none). */
static struct decision_owner owner_answer(int known, int64_t key_id, const char *model,
                                          int64_t tokens, int pending)
{
	struct decision_owner o = { 0 };

	o.known = known;
	o.pending = pending;
	o.e.key_id = key_id;
	snprintf(o.e.model, sizeof(o.e.model), "%s", model);
	o.e.tokens = tokens;
	return o;
}

/* decision_make on req, then decision_owned_by with o when it asked for an owner. */
static struct decision decide_owned(const struct decision_request *req,
                                    const struct decision_owner *o)
{
	struct decision d;

	decision_make(fx.kt, req, &d);
	if (d.owner_query)
		decision_owned_by(fx.kt, req, o, &d);
	return d;
}

/* decision_make stops at a stored response's id and takes who made it as input: both
 * answers of the store, for a stored response's path and for a previous_response_id. */
static void test_owner_as_input(void)
{
	const char *prev = "{\"model\":\"gpt-a\",\"previous_response_id\":\"resp_p\"}";
	struct decision_request get = { 0 }, create = { 0 };
	struct decision_owner mine = owner_answer(1, 1, "gpt-a", 700, 0);
	struct decision_owner theirs = owner_answer(1, 2, "gpt-a", 0, 0);
	struct decision_owner none = owner_answer(0, 0, "", 0, 0);
	struct decision_owner soon = owner_answer(0, 0, "", 0, 1);
	struct decision_owner gone = owner_answer(1, 1, "no-such-model", 0, 0);
	struct decision_owner elsewhere = owner_answer(1, 1, "claude-a", 0, 0);
	struct spop_str id;
	struct decision d;

	get.authorization = (struct spop_str){ "Bearer " FIX_KEY_OPEN, strlen("Bearer " FIX_KEY_OPEN) };
	get.method = (struct spop_str){ "GET", 3 };
	get.path = (struct spop_str){ "/v1/responses/resp_z/input_items", 32 };
	get.body_length_known = 1;
	create = get;
	create.method = (struct spop_str){ "POST", 4 };
	create.path = (struct spop_str){ "/v1/responses", 13 };
	create.body = (struct spop_str){ prev, strlen(prev) };
	create.body_size = (int64_t)strlen(prev);

	/* asked, unanswered: refused as an id nobody made */
	decision_make(fx.kt, &get, &d);
	CHECK_EQ_INT(d.owner_query, DECISION_OWNER_PATH);
	CHECK(d.verdict == DECISION_UNKNOWN_RESPONSE && !d.wait && d.model == NULL);
	id = decision_owner_id(&d, &get);
	CHECK(id.len == 6 && memcmp(id.ptr, "resp_z", 6) == 0);
	CHECK_EQ_STR(d.response_id, "resp_z");
	d = decide_owned(&get, &mine);
	CHECK(d.verdict == DECISION_ALLOW && d.unbilled && !d.capture);
	CHECK_EQ_STR(d.model->name, "gpt-a");
	d = decide_owned(&get, &theirs);
	CHECK(d.verdict == DECISION_UNKNOWN_RESPONSE && !d.wait && d.model == NULL);
	d = decide_owned(&get, &none);
	CHECK(d.verdict == DECISION_UNKNOWN_RESPONSE && !d.wait);
	d = decide_owned(&get, &soon);
	CHECK(d.verdict == DECISION_UNKNOWN_RESPONSE && d.wait);
	d = decide_owned(&get, &gone);
	CHECK_EQ_INT(d.verdict, DECISION_NO_ROUTE);

	decision_make(fx.kt, &create, &d);
	CHECK_EQ_INT(d.owner_query, DECISION_OWNER_PREVIOUS);
	CHECK(d.verdict == DECISION_UNKNOWN_RESPONSE && !d.wait && !d.creates_response);
	id = decision_owner_id(&d, &create);
	CHECK(id.len == 6 && memcmp(id.ptr, "resp_p", 6) == 0);
	d = decide_owned(&create, &mine);
	CHECK(d.verdict == DECISION_ALLOW && d.creates_response && !d.unbilled);
	CHECK_EQ_INT(d.previous_tokens, 700);
	d = decide_owned(&create, &theirs);
	CHECK(d.verdict == DECISION_UNKNOWN_RESPONSE && !d.creates_response);
	CHECK_EQ_INT(d.previous_tokens, 0);
	d = decide_owned(&create, &soon);
	CHECK(d.verdict == DECISION_UNKNOWN_RESPONSE && d.wait);
	/* made on another provider: nothing this route can read */
	d = decide_owned(&create, &elsewhere);
	CHECK(d.verdict == DECISION_UNKNOWN_RESPONSE && !d.wait);

	/* a request naming no stored response asks nothing */
	create.body = (struct spop_str){ "{\"model\":\"gpt-a\"}", 17 };
	create.body_size = 17;
	decision_make(fx.kt, &create, &d);
	CHECK(d.owner_query == DECISION_OWNER_NONE && d.verdict == DECISION_ALLOW);
	CHECK_EQ_INT(decision_owner_id(&d, &create).len, 0);
}

/* A request that names no output bound is estimated at its model's largest answer
 * (models.max_output) when the model has one, else at the agent's default. */
static void test_model_max_output(void)
{
	struct decision_request req = { .body_size = 40 };
	char err[256];
	struct decision d;

	d = decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\"}");
	decision_estimate(&d, &req, 4096);
	CHECK_EQ_INT(d.est_completion_tokens, 4096);
	CHECK_EQ_INT(db_exec(fx.db, "UPDATE models SET max_output = 32000 WHERE name = 'gpt-a'",
	                     err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&fx), 0);
	d = decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\"}");
	decision_estimate(&d, &req, 4096);
	CHECK_EQ_INT(d.est_completion_tokens, 32000);
	d = decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\",\"max_tokens\":100}");
	decision_estimate(&d, &req, 4096);
	CHECK_EQ_INT(d.est_completion_tokens, 100);
	CHECK_EQ_INT(db_exec(fx.db, "UPDATE models SET max_output = NULL", err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&fx), 0);
}

/* A team's allow-list narrows its keys' own: a model the key allows and its team does
 * not is refused at the team's level, one the key refuses at the key's; what both allow
 * is what the key may use everywhere (the capture's list, the model list). A team's
 * limit refusal names the team, its name escaped. The row records the key's team. */
static void test_teams(void)
{
	struct decision_request req = { 0 };
	struct acct_row row;
	struct decision d;
	char err[256], buf[2048], allow[64];
	int n;

	CHECK_EQ_INT(db_exec(fx.db, "INSERT INTO teams (id, name, created_at, rpm) VALUES"
	                            " (9, 'a\"b''s', 1, 5), (10, 'open-team', 1, NULL);"
	                            "INSERT INTO team_models VALUES (9, 'gpt-a'), (9, 'claude-a');"
	                            "UPDATE keys SET team_id = 9 WHERE id IN (1, 2);"
	                            "UPDATE keys SET team_id = 10 WHERE id = 4;",
	                     err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&fx), 0);
	/* Key 2 allows gpt-b and claude-a, its team gpt-a and claude-a. */
	CHECK_EQ_INT(decide(FIX_KEY_RESTRICTED, "{\"model\":\"gpt-b\"}").verdict,
	             DECISION_TEAM_MODEL_FORBIDDEN);
	CHECK_EQ_INT(decide(FIX_KEY_RESTRICTED, "{\"model\":\"gpt-a\"}").verdict,
	             DECISION_MODEL_FORBIDDEN);
	CHECK_EQ_INT(decide_with("Bearer " FIX_KEY_RESTRICTED, NULL, "/v1/messages",
	                         "{\"model\":\"claude-a\"}", 0).verdict, DECISION_ALLOW);
	/* Key 1 allows every model: its team's list is its. */
	CHECK_EQ_INT(decide(FIX_KEY_OPEN, "{\"model\":\"gpt-b\"}").verdict,
	             DECISION_TEAM_MODEL_FORBIDDEN);
	d = decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\"}");
	CHECK_EQ_INT(d.verdict, DECISION_ALLOW);
	CHECK_EQ_INT(decision_allow_list(d.key, d.model->provider, allow, sizeof(allow)),
	             strlen("gpt-a"));
	CHECK_EQ_STR(allow, "gpt-a");
	join_decided(&d, "id-1", 4, 1000, &row);
	CHECK_EQ_INT(row.team_id, 9);
	/* A team without a list narrows nothing; a key without a team records none. */
	CHECK_EQ_INT(decide(FIX_KEY_NODEFAULT, "{\"model\":\"gpt-b\"}").verdict, DECISION_ALLOW);
	d = decide(FIX_KEY_REVOKED, "{\"model\":\"gpt-a\"}");
	join_decided(&d, "id-2", 4, 1000, &row);
	CHECK_EQ_INT(row.team_id, ACCT_NONE);

	req.path.ptr = "/v1/chat/completions";
	req.path.len = strlen(req.path.ptr);
	d = decide(FIX_KEY_RESTRICTED, "{\"model\":\"gpt-b\"}");
	n = wording_error_json(&d, &req, buf, sizeof(buf));
	CHECK(n > 0 && strstr(buf, "\"code\":\"team_model_not_allowed\"") != NULL);
	CHECK(strstr(buf, "The team 'a\\\"b's' of key tly_restrict") != NULL);
	d = decide(FIX_KEY_OPEN, "{\"model\":\"gpt-a\"}");
	decision_limit(&d, QUOTA_RPM, QUOTA_LEVEL_TEAM);
	CHECK_EQ_INT(d.verdict, DECISION_TEAM_RPM_LIMITED);
	CHECK_EQ_INT(decision_http_status(d.verdict), 429);
	n = wording_error_json(&d, &req, buf, sizeof(buf));
	CHECK(n > 0 && strstr(buf, "\"code\":\"team_rate_limit_requests\"") != NULL);
	CHECK(strstr(buf, "of key tly_open0000 is limited to 5 requests per minute") != NULL);
	decision_limit(&d, QUOTA_BUDGET, QUOTA_LEVEL_TEAM);
	CHECK_EQ_STR(decision_verdict_name(d.verdict), "team_budget_exceeded");
	CHECK_EQ_INT(decision_http_status(d.verdict), 402);
	decision_limit(&d, QUOTA_BUDGET, QUOTA_LEVEL_KEY);
	CHECK_EQ_STR(decision_verdict_name(d.verdict), "budget_exceeded");
	decision_limit(&d, QUOTA_BUDGET, QUOTA_LEVEL_TAG);
	CHECK_EQ_STR(decision_verdict_name(d.verdict), "tag_budget_exceeded");
	/* A budget whose share this node could not top up in time, at any level: 429, which
	 * clients retry, and no claim that anything is spent. */
	{
		static const enum quota_level levels[] = {
			QUOTA_LEVEL_KEY, QUOTA_LEVEL_TEAM, QUOTA_LEVEL_TAG, QUOTA_LEVEL_END_USER,
			QUOTA_LEVEL_KEY_MODEL, QUOTA_LEVEL_TEAM_MODEL,
		};
		size_t i;

		for (i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
			decision_limit(&d, QUOTA_BUDGET_PENDING, levels[i]);
			CHECK_EQ_STR(decision_verdict_name(d.verdict), "budget_share_pending");
			CHECK_EQ_INT(decision_http_status(d.verdict), 429);
		}
		n = wording_error_json(&d, &req, buf, sizeof(buf));
		CHECK(n > 0 && strstr(buf, "\"code\":\"budget_share_pending\"") != NULL);
		CHECK(strstr(buf, "\"type\":\"rate_limit_error\"") != NULL);
		CHECK(strstr(buf, "could not get its share in time; retry shortly.") != NULL);
	}
	/* An end user's limits: named, its id escaped, the figure its own. */
	{
		struct quota_cfg eu = { .rpm = 3, .budget_micros = 2500000, .period = QUOTA_PERIOD_WEEK };

		snprintf(d.end_user, sizeof(d.end_user), "al\"ice");
		d.end_user_quota = &eu;
		decision_limit(&d, QUOTA_RPM, QUOTA_LEVEL_END_USER);
		CHECK_EQ_INT(decision_http_status(d.verdict), 429);
		n = wording_error_json(&d, &req, buf, sizeof(buf));
		CHECK(n > 0 && strstr(buf, "\"code\":\"end_user_rate_limit_requests\"") != NULL);
		CHECK(strstr(buf, "The end user 'al\\\"ice' of key tly_open0000 is limited to 3"
		                  " requests per minute") != NULL);
		decision_limit(&d, QUOTA_BUDGET, QUOTA_LEVEL_END_USER);
		CHECK_EQ_INT(decision_http_status(d.verdict), 402);
		n = wording_error_json(&d, &req, buf, sizeof(buf));
		CHECK(n > 0 && strstr(buf, "\"code\":\"end_user_budget_exceeded\"") != NULL);
		CHECK(strstr(buf, "has spent its budget of $2.500000 for this week") != NULL);
		decision_limit(&d, QUOTA_TPM, QUOTA_LEVEL_END_USER);
		CHECK_EQ_STR(decision_verdict_name(d.verdict), "end_user_rate_limit_tokens");
		decision_limit(&d, QUOTA_BUDGET, (enum quota_level)9);
		CHECK_EQ_INT(d.verdict, DECISION_AGENT_ERROR);
	}
	/* A key's and a team's budget for the model: 402, the model and the level named. */
	{
		struct kt_model_budget mb = { .id = 1, .model = "gpt-a",
		                              .quota = { .budget_micros = 1500000,
		                                         .period = QUOTA_PERIOD_DAY } };

		d.key_model_budget = d.team_model_budget = &mb;
		decision_limit(&d, QUOTA_BUDGET, QUOTA_LEVEL_KEY_MODEL);
		CHECK_EQ_INT(decision_http_status(d.verdict), 402);
		n = wording_error_json(&d, &req, buf, sizeof(buf));
		CHECK(n > 0 && strstr(buf, "\"code\":\"model_budget_exceeded\"") != NULL);
		CHECK(strstr(buf, "Key tly_open0000, for the model 'gpt-a', has spent its budget"
		                  " of $1.500000 for this day.") != NULL);
		decision_limit(&d, QUOTA_BUDGET, QUOTA_LEVEL_TEAM_MODEL);
		CHECK_EQ_INT(decision_http_status(d.verdict), 402);
		n = wording_error_json(&d, &req, buf, sizeof(buf));
		CHECK(n > 0 && strstr(buf, "\"code\":\"team_model_budget_exceeded\"") != NULL);
		CHECK(strstr(buf, "The team 'a\\\"b's' of key tly_open0000, for the model 'gpt-a',"
		                  " has spent its budget of $1.500000 for this day.") != NULL);
		mb.quota.period = QUOTA_PERIOD_TOTAL;
		n = wording_error_json(&d, &req, buf, sizeof(buf));
		CHECK(n > 0 && strstr(buf, "for this team.") != NULL);
	}

	CHECK_EQ_INT(db_exec(fx.db, "UPDATE keys SET team_id = NULL; DELETE FROM teams;",
	                     err, sizeof(err)), 0);
	CHECK_EQ_INT(fixture_reload(&fx), 0);
}

int main(void)
{
	if (fixture_open(&fx) < 0)
		return 1;
	RUN(test_keys);
	RUN(test_allow_lists);
	RUN(test_teams);
	RUN(test_allow_list);
	RUN(test_responses_endpoint);
	RUN(test_model_lists);
	RUN(test_count_tokens_is_unbilled);
	RUN(test_cut_route_without_default);
	RUN(test_models_and_bodies);
	RUN(test_stored_responses);
	RUN(test_usage_path);
	RUN(test_end_users);
	RUN(test_tags);
	RUN(test_end_users_page);
	RUN(test_owner_as_input);
	RUN(test_capture_choice);
	RUN(test_capture_choice_with_large_buffers);
	RUN(test_usage_amendment);
	RUN(test_usage_amendment_of_a_cut_body);
	RUN(test_estimate);
	RUN(test_estimate_inputs_by_reference);
	RUN(test_truncated_bodies);
	RUN(test_error_bodies);
	RUN(test_endpoints_and_apis);
	RUN(test_chunked_bodies);
	RUN(test_cost_policy);
	RUN(test_body_cap);
	RUN(test_cache_writes);
	RUN(test_key_cache_writes);
	RUN(test_model_max_output);
	RUN(test_reload_sees_changes);
	RUN(test_many_keys_all_found);
	fixture_close(&fx);
	return UNIT_DONE();
}
