/* decision: turns what HAProxy sent about a request into a verdict (I/O threads, pure).
 *
 * Order of checks: key first (an unauthenticated caller learns nothing about models),
 * then the body, then the model and the key's allow-list, then the route. */
#include "decision.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "acct.h"
#include "enduser.h"
#include "keytable.h"
#include "price.h"
#include "tier.h"

/* Bytes of a unary JSON answer per max_tokens token that HAProxy's buffer must hold
 * for json_query to see the usage: ~6 per token of text in JSON, with room for
 * multi-byte and escaped characters and the response's own fields. The 16 KB buffer
 * thus reads answers of up to 1024 tokens. */
#define DECISION_JSON_BYTES_PER_TOKEN 16
/* What an input given by URL or file id is estimated at (docs/limits.md): an image at
 * the most a large one costs (Anthropic's ~1.15 megapixels: ~1 600 tokens), a file or a
 * document at 20 pages of ~1 000 tokens. */
#define DECISION_URL_IMAGE_TOKENS 1600
#define DECISION_URL_FILE_TOKENS 20000
#define DECISION_JSON_BUFFER 16384

/* The longest unary answer a provider's model gives today (128k output tokens): a
 * buffer that holds it reads an answer whose request sets no bound too. */
#define DECISION_OUTPUT_TOKENS_MAX 131072

/* What the capture filter puts before the closing brace of a cut OpenAI stream body (or
 * as many spaces, when the rest shows it is no stream or asked for usage itself). */
#define DECISION_AMEND_TAIL ",\"stream_options\":{\"include_usage\":true}"

/* Estimates (tokens, micro-dollars) saturate here, as quota.c clamps what it is given. */
#define DECISION_ESTIMATE_MAX 1000000000000000LL

struct decision_verdict_info {
	const char *name;       /* verdict name, also the error "code" */
	int status;
};

static const struct decision_verdict_info verdicts[DECISION_VERDICT_COUNT] = {
	[DECISION_ALLOW] = { "allow", 0 },
	[DECISION_NO_KEY] = { "missing_api_key", 401 },
	[DECISION_UNKNOWN_KEY] = { "invalid_api_key", 401 },
	[DECISION_REVOKED_KEY] = { "revoked_api_key", 401 },
	[DECISION_BAD_ENDPOINT] = { "unsupported_endpoint", 404 },
	[DECISION_BAD_BODY] = { "invalid_body", 400 },
	[DECISION_MODEL_REQUIRED] = { "model_required", 400 },
	[DECISION_UNKNOWN_MODEL] = { "model_not_found", 404 },
	[DECISION_MODEL_FORBIDDEN] = { "model_not_allowed", 403 },
	[DECISION_BODY_TOO_LARGE] = { "body_too_large", 413 },
	[DECISION_WRONG_API] = { "model_api_mismatch", 400 },
	[DECISION_NO_ROUTE] = { "no_route", 502 },
	[DECISION_AGENT_ERROR] = { "gateway_error", 500 },
	[DECISION_RPM_LIMITED] = { "rate_limit_requests", 429 },
	[DECISION_TPM_LIMITED] = { "rate_limit_tokens", 429 },
	[DECISION_CONCURRENCY_LIMITED] = { "concurrency_limit", 429 },
	/* 402, not 429: SDKs retry a 429 on their own, and a spent budget stays spent. */
	[DECISION_BUDGET_EXCEEDED] = { "budget_exceeded", 402 },
	[DECISION_UNAUTHENTICATED] = { "gateway_unauthenticated", 500 },
	[DECISION_BUSY] = { "gateway_busy", 503 },
	[DECISION_MODELS_LISTED] = { "models_listed", 200 },
	[DECISION_STORED_STATE] = { "unsupported_parameter", 400 },
	[DECISION_UNKNOWN_RESPONSE] = { "response_not_found", 404 },
	[DECISION_COST_POLICY] = { "unsupported_value", 400 },
	[DECISION_TEAM_MODEL_FORBIDDEN] = { "team_model_not_allowed", 403 },
	[DECISION_TEAM_RPM_LIMITED] = { "team_rate_limit_requests", 429 },
	[DECISION_TEAM_TPM_LIMITED] = { "team_rate_limit_tokens", 429 },
	[DECISION_TEAM_CONCURRENCY_LIMITED] = { "team_concurrency_limit", 429 },
	[DECISION_TEAM_BUDGET_EXCEEDED] = { "team_budget_exceeded", 402 },
	[DECISION_USAGE_REPORTED] = { "usage_reported", 200 },
	[DECISION_USAGE_UNAVAILABLE] = { "usage_unavailable", 503 },
	[DECISION_END_USER_REQUIRED] = { "end_user_required", 400 },
	[DECISION_END_USER_FORBIDDEN] = { "end_user_forbidden", 400 },
	[DECISION_BAD_END_USER] = { "invalid_end_user", 400 },
	[DECISION_BAD_QUERY] = { "invalid_query", 400 },
	[DECISION_BAD_TAGS] = { "invalid_tags", 400 },
	[DECISION_TAG_CONFLICT] = { "tag_conflict", 400 },
	[DECISION_TAG_BUDGET_EXCEEDED] = { "tag_budget_exceeded", 402 },
	[DECISION_TAG_NOT_ALLOWED] = { "tag_not_allowed", 403 },
	[DECISION_END_USER_RPM_LIMITED] = { "end_user_rate_limit_requests", 429 },
	[DECISION_END_USER_TPM_LIMITED] = { "end_user_rate_limit_tokens", 429 },
	[DECISION_END_USER_BUDGET_EXCEEDED] = { "end_user_budget_exceeded", 402 },
	[DECISION_MODEL_BUDGET_EXCEEDED] = { "model_budget_exceeded", 402 },
	[DECISION_TEAM_MODEL_BUDGET_EXCEEDED] = { "team_model_budget_exceeded", 402 },
	/* 429: nothing is spent; a client's own retry after Retry-After finds the share. */
	[DECISION_BUDGET_PENDING] = { "budget_share_pending", 429 },
};

/* The inference endpoints the gateway serves, and the API each belongs to. Anything else
 * (files, batches, fine-tuning, ...) would reach a provider under the operator's
 * credential without a model to judge or account, so it is refused. */
static const struct decision_endpoint {
	const char *path;
	enum kt_api api;
	int large;              /* responses usually exceed HAProxy's buffer (vectors) */
	int stream_options;     /* streams report usage only if stream_options asks */
	int unbilled;           /* answers are counts, no usage to bill (decision.h) */
	int output_bound;       /* the answer is bounded by max_output_tokens, not max_tokens */
	int stored_state;       /* the body may name state stored upstream (decision_judge) */
	int echoes;             /* the answer may repeat the request's content beside its
	                         * output (the Responses object echoes instructions, tools,
	                         * text and metadata; Anthropic's citations quote documents):
	                         * its size is bounded by the body's plus the output's */
} decision_endpoints[] = {
	{ "/v1/chat/completions", KT_API_OPENAI, 0, 1, 0, 0, 0, 0 },
	{ "/v1/completions", KT_API_OPENAI, 0, 1, 0, 0, 0, 0 },
	{ "/v1/embeddings", KT_API_OPENAI, 1, 0, 0, 0, 0, 0 },
	/* Responses streams always end with their usage (response.completed, .incomplete
	 * or .failed): nothing to amend. */
	{ "/v1/responses", KT_API_OPENAI, 0, 0, 0, 1, 1, 1 },
	{ "/v1/responses/compact", KT_API_OPENAI, 0, 0, 0, 1, 1, 1 },
	{ "/v1/responses/input_tokens", KT_API_OPENAI, 0, 0, 1, 0, 1, 0 },
	{ "/v1/messages", KT_API_ANTHROPIC, 0, 0, 0, 0, 0, 1 },
	{ "/v1/messages/count_tokens", KT_API_ANTHROPIC, 0, 0, 1, 0, 0, 0 },
};

/* Whether s begins with lit. */
static int decision_str_begins(struct spop_str s, const char *lit)
{
	size_t n = strlen(lit);

	return s.len >= n && memcmp(s.ptr, lit, n) == 0;
}

static int decision_str_is(struct spop_str s, const char *lit)
{
	return s.len == strlen(lit) && memcmp(s.ptr, lit, s.len) == 0;
}

static const struct decision_endpoint *decision_find_endpoint(const struct decision_request *req)
{
	size_t i;

	if (!decision_str_is(req->method, "POST"))
		return NULL;
	for (i = 0; i < sizeof(decision_endpoints) / sizeof(decision_endpoints[0]); i++)
		if (decision_str_is(req->path, decision_endpoints[i].path))
			return &decision_endpoints[i];
	return NULL;
}

int decision_http_status(enum decision_verdict v)
{
	return (unsigned)v < DECISION_VERDICT_COUNT ? verdicts[v].status : 500;
}

const char *decision_verdict_name(enum decision_verdict v)
{
	return (unsigned)v < DECISION_VERDICT_COUNT ? verdicts[v].name : "unknown";
}

static struct spop_str decision_trim(struct spop_str s)
{
	while (s.len && (*s.ptr == ' ' || *s.ptr == '\t')) {
		s.ptr++;
		s.len--;
	}
	while (s.len && (s.ptr[s.len - 1] == ' ' || s.ptr[s.len - 1] == '\t'))
		s.len--;
	return s;
}

/* The gateway key: "Authorization: Bearer K" (scheme case-insensitive, as RFC 7235
 * says) or else "x-api-key: K", the header Anthropic clients send. */
static struct spop_str decision_find_key(const struct decision_request *req)
{
	struct spop_str auth = decision_trim(req->authorization);
	struct spop_str none = { NULL, 0 };

	if (auth.len > 7 && strncasecmp(auth.ptr, "bearer", 6) == 0 &&
	    (auth.ptr[6] == ' ' || auth.ptr[6] == '\t')) {
		auth.ptr += 7;
		auth.len -= 7;
		return decision_trim(auth);
	}
	if (req->api_key.len)
		return decision_trim(req->api_key);
	return none;
}

/* A model's default output price, for ranking the routes of a cut body; -1 none. */
static int64_t decision_base_output(const struct kt_model *m)
{
	const struct price_card *c = price_pick(&m->prices, PRICE_TIER_DEFAULT, -1);

	return c ? c->micros[PRICE_OUTPUT] : PRICE_UNSET;
}

/* A name the capture filter can match as it is: a JSON string's bytes without escapes,
 * and no line break (the list's separator). */
static int decision_name_plain(const char *name)
{
	for (; *name; name++)
		if ((unsigned char)*name < 0x20 || *name == '"' || *name == '\\')
			return 0;
	return 1;
}

/* The model that routes a restricted key's cut body whose "model" comes past the cut,
 * for the capture filter to judge that one against what the route's provider may serve
 * the key (decision_allow_list), or against the route alone (route_only:
 * decision_scan_list): the key's default when it is allowed and speaks the endpoint's
 * API, else, when one provider serves every allowed model of that API, the dearest of
 * them. NULL when there is none, or the list is too long to send. (The reservation
 * takes the dearest price of each kind, unless route_only: decision_dearest.) */
static const struct kt_model *decision_cut_route(const struct kt_key *k, enum kt_api api,
                                                 int route_only)
{
	const struct kt_model *m = k->default_model, *best = NULL;
	size_t i;

	if (!(m && m->provider && m->provider->api == api && keytable_key_allows(k, m))) {
		m = NULL;
		for (i = 0; i < k->nallowed; i++) {
			const struct kt_model *a = k->allowed[i];

			if (!a->provider || a->provider->api != api)
				continue;
			if (best && best->provider != a->provider)
				return NULL;
			if (!best || decision_base_output(a) > decision_base_output(best))
				best = a;
		}
		m = best;
	}
	if (!m || (!route_only &&
	           decision_allow_list(k, m->provider, NULL, 0) >= DECISION_ALLOW_LIST_MAX))
		return NULL;
	return m;
}

/* The card of m for the tier the request asks for and a prompt of prompt tokens; every
 * price unset when it has none. */
static struct price_card decision_card(const struct kt_model *m, const struct decision *d,
                                       int64_t prompt)
{
	const struct price_card *c = price_pick(&m->prices, d->body.service_tier, prompt);
	struct price_card none;
	int i;

	if (c)
		return *c;
	memset(&none, 0, sizeof(none));
	for (i = 0; i < PRICE_CLASSES; i++)
		none.micros[i] = PRICE_UNSET;
	return none;
}

/* The highest input and output prices among the models key k may use that provider p
 * serves: what a request whose model the gateway has not seen may cost. */
static struct price_card decision_dearest(const struct decision *d, const struct kt_provider *p,
                                          int64_t prompt)
{
	struct price_card most = decision_card(d->model, d, prompt);
	size_t i;

	for (i = 0; i < d->key->nallowed; i++) {
		struct price_card a;

		if (d->key->allowed[i]->provider != p)
			continue;
		a = decision_card(d->key->allowed[i], d, prompt);
		if (a.micros[PRICE_INPUT] > most.micros[PRICE_INPUT])
			most.micros[PRICE_INPUT] = a.micros[PRICE_INPUT];
		if (a.micros[PRICE_OUTPUT] > most.micros[PRICE_OUTPUT])
			most.micros[PRICE_OUTPUT] = a.micros[PRICE_OUTPUT];
	}
	return most;
}

/* Checks the body and picks the model; returns the verdict so far. */
static enum decision_verdict decision_pick_model(const struct keytable *t,
                                                 const struct decision_request *req,
                                                 const struct decision_endpoint *ep,
                                                 struct decision *d)
{
	enum reqbody_status st = reqbody_inspect(req->body.ptr, req->body.len, &d->body);
	const struct kt_model *route;

	if (st == REQBODY_INVALID)
		return DECISION_BAD_BODY;
	/* Without a Content-Length (chunked, or HTTP/2), HAProxy's body size is only what it
	 * buffered: only a whole JSON object proves that nothing follows. */
	d->body_truncated = req->body_truncated || st == REQBODY_PREFIX ||
	                    (!req->body_length_known && st != REQBODY_COMPLETE);
	d->stream = st == REQBODY_PREFIX ? d->body.stream : d->body.stream == 1;
	/* What follows the cut may name another model, and upstreams take the last one.
	 * The capture filter reads every cut body to its end and spoils a second "model"
	 * before the end goes up, so an allow-list can judge the one in a prefix cut inside
	 * the object; one whose only "model" is past the cut goes to a route the key may
	 * use, where the filter judges the model it meets. A prefix that is not cut JSON
	 * (HAProxy's flag alone, a chunked body's padding) stays unjudgeable. */
	/* Budgets per model are held at the model routed to, so a key (or team) with some
	 * takes only that model past the cut, whatever else it may use. */
	d->scan_route_only = d->key->nmodel_budgets > 0 ||
	                     (d->key->team && d->key->team->nmodel_budgets > 0);
	if (d->body_truncated && (d->key->restricted || d->scan_route_only) && !d->body.has_model) {
		/* An unrestricted key allows its default and has no list: its default alone. */
		route = decision_cut_route(d->key, ep->api, d->scan_route_only);
		if (st != REQBODY_PREFIX || !route ||
		    (d->scan_route_only && !decision_name_plain(route->name)))
			return DECISION_BODY_TOO_LARGE;
		d->allow_scan = 1;
		d->model_source = DECISION_MODEL_KEY_DEFAULT;
		d->model = route;
		return DECISION_ALLOW;
	}
	if (d->body_truncated && (d->key->restricted || d->scan_route_only) && st != REQBODY_PREFIX)
		return DECISION_BODY_TOO_LARGE;
	if (d->body.has_model) {
		d->model_source = DECISION_MODEL_BODY;
		d->model = d->body.model_unusable
		               ? NULL
		               : keytable_find_model(t, d->body.model, strlen(d->body.model));
		return d->model ? DECISION_ALLOW : DECISION_UNKNOWN_MODEL;
	}
	if (!d->key->default_model)
		return DECISION_MODEL_REQUIRED;
	d->model_source = DECISION_MODEL_KEY_DEFAULT;
	d->model = d->key->default_model;
	return DECISION_ALLOW;
}

/* Usage of an OpenAI stream comes only with stream_options.include_usage true: the
 * gateway asks for it whatever the client sent. A body seen whole is edited where its
 * stream_options says otherwise (the client keeps every other option); a cut one is
 * read to its end by the capture filter, which spoils a second model, stream or
 * stream_options after the cut and finishes the amendment, for which the body grows by
 * the tail's length (spaces when it turns out no stream, or one that asked) unless the
 * part seen already settles it. A client that asked itself is left alone and keeps its
 * usage event. */
static void decision_amend(struct decision *d)
{
	const struct reqbody_stream_options *so = &d->body.stream_options;
	int asked = so->present && so->whole && so->is_object && so->include_usage == 1;

	if (d->body_truncated) {
		d->amend_scan = 1;
		if (d->body.stream != 0 && !(d->body.stream == 1 && asked))
			d->amend_text = DECISION_AMEND_TAIL;
		return;
	}
	if (d->stream != 1 || asked)
		return;
	if (!so->present) {
		d->amend_at = (long)d->body.open_end;
		d->amend_text = "\"stream_options\":{\"include_usage\":true},";
	} else if (!so->is_object) {
		d->amend_at = (long)so->value_at;
		d->amend_cut = (long)so->value_len;
		d->amend_text = "{\"include_usage\":true}";
	} else if (so->include_usage < 0) {
		d->amend_at = (long)so->open_end;
		d->amend_text = so->empty ? "\"include_usage\":true" : "\"include_usage\":true,";
	} else {
		d->amend_at = (long)so->iu_at;
		d->amend_cut = (long)so->iu_len;
		d->amend_text = "true";
	}
}

/* Whether HAProxy's json_query reads the whole unary answer to a request bounded by
 * max_tokens (-1: no bound): the buffer HAProxy reads it in is json_max bytes (its large
 * buffers, 3.4+), or the regular 16 KB when it said nothing. An answer that echoes the
 * request (ep->echoes) also holds the body's bytes: only large buffers take it, and only
 * when the body's size is known; in the regular buffer a key holder's padding would
 * push the usage out of sight. */
static int decision_json_holds(const struct decision_request *req, int echoes, long max_tokens)
{
	int64_t bytes = req->json_max > DECISION_JSON_BUFFER ? req->json_max : DECISION_JSON_BUFFER;
	int64_t tokens;

	if (echoes) {
		if (req->json_max <= DECISION_JSON_BUFFER || req->body_size < 0 ||
		    req->body_size >= bytes)
			return 0;
		bytes -= req->body_size;
	}
	tokens = bytes / DECISION_JSON_BYTES_PER_TOKEN;
	if (max_tokens < 0)
		return tokens >= DECISION_OUTPUT_TOKENS_MAX;
	return max_tokens <= tokens;
}

enum kt_api decision_models_api(const struct decision_request *req)
{
	return req->anthropic_version.len || req->api_key.len ? KT_API_ANTHROPIC : KT_API_OPENAI;
}

/* GET /v1/models lists what the key may use; GET /v1/models/ID shows one of them. Any
 * other request is no endpoint of the gateway's. A model the key may not use is as
 * unknown as one that does not exist: the list is the key's, not the gateway's. */
static enum decision_verdict decision_models(const struct keytable *t,
                                             const struct decision_request *req,
                                             struct decision *d)
{
	static const char list[] = "/v1/models";
	const size_t n = sizeof(list) - 1;
	const struct kt_model *m;
	const char *id;
	size_t idlen;

	if (!decision_str_is(req->method, "GET") || !decision_str_begins(req->path, list))
		return DECISION_BAD_ENDPOINT;
	if (req->path.len == n)
		return DECISION_MODELS_LISTED;
	if (req->path.ptr[n] != '/' || req->path.len == n + 1)
		return DECISION_BAD_ENDPOINT;
	id = req->path.ptr + n + 1;
	idlen = req->path.len - n - 1;
	m = keytable_find_model(t, id, idlen);
	if (!m || !m->provider || m->provider->api != decision_models_api(req) ||
	    !keytable_key_allows(d->key, m)) {
		d->body.has_model = 1;
		snprintf(d->body.model, sizeof(d->body.model), "%.*s", (int)idlen, id);
		return DECISION_UNKNOWN_MODEL;
	}
	d->model = m;
	return DECISION_MODELS_LISTED;
}

/* The value of one hex digit; -1 for none. */
static int decision_hex(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
	     : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Decodes a query value's %XX escapes ('+' is itself: ids may hold one) into buf (cap
 * bytes, NUL-terminated): its length, or -1 when malformed or too long. */
static long decision_unpercent(struct spop_str v, char *buf, size_t cap)
{
	size_t i, o = 0;

	for (i = 0; i < v.len; i++) {
		char c = v.ptr[i];

		if (c == '%') {
			int hi, lo;

			if (i + 2 >= v.len)
				return -1;
			if ((hi = decision_hex(v.ptr[i + 1])) < 0 || (lo = decision_hex(v.ptr[i + 2])) < 0)
				return -1;
			c = (char)(hi << 4 | lo);
			i += 2;
		}
		if (o + 1 >= cap)
			return -1;
		buf[o++] = c;
	}
	buf[o] = '\0';
	return (long)o;
}

/* The page GET /tally/v1/usage/end_users asks for (decision.h): DECISION_USAGE_REPORTED
 * with it in d, or DECISION_BAD_QUERY. Other parameters are ignored, as on every path. */
static enum decision_verdict decision_page(const struct decision_request *req,
                                           struct decision *d)
{
	/* No query: HAProxy sends none, and NULL + 0 is no pointer arithmetic C allows. */
	const char *p = req->query.ptr ? req->query.ptr : "", *end = p + req->query.len;
	int limits = 0, afters = 0;

	d->end_users_page = 1;
	d->page_limit = DECISION_PAGE_DEFAULT;
	if (req->query.len > DECISION_QUERY_MAX)
		return DECISION_BAD_QUERY;
	while (p < end) {
		const char *stop = memchr(p, '&', (size_t)(end - p)), *eq;
		struct spop_str name, value;
		long n;

		stop = stop ? stop : end;
		eq = memchr(p, '=', (size_t)(stop - p));
		name = (struct spop_str){ p, (size_t)((eq ? eq : stop) - p) };
		value = eq ? (struct spop_str){ eq + 1, (size_t)(stop - eq - 1) }
		           : (struct spop_str){ stop, 0 };
		if (decision_str_is(name, "limit")) {
			char digits[4];
			long i, v = 0;

			if (limits++ || (n = decision_unpercent(value, digits, sizeof(digits))) <= 0)
				return DECISION_BAD_QUERY;
			for (i = 0; i < n; i++) {
				if (digits[i] < '0' || digits[i] > '9')
					return DECISION_BAD_QUERY;
				v = v * 10 + (digits[i] - '0');
			}
			if (v < 1 || v > DECISION_PAGE_MAX)
				return DECISION_BAD_QUERY;
			d->page_limit = (int)v;
		} else if (decision_str_is(name, "after")) {
			if (afters++ ||
			    (n = decision_unpercent(value, d->page_after, sizeof(d->page_after))) < 0 ||
			    (n > 0 && !enduser_id_ok(d->page_after, (size_t)n)))
				return DECISION_BAD_QUERY;
		}
		p = stop < end ? stop + 1 : end;
	}
	return DECISION_USAGE_REPORTED;
}

/* The gateway's own paths (/tally/...): GET /tally/v1/usage, the key's usage, and
 * GET /tally/v1/usage/end_users, its end users' in pages; any other is no endpoint.
 * Never forwarded: no provider has them. */
static enum decision_verdict decision_own_path(const struct decision_request *req,
                                               struct decision *d)
{
	if (!decision_str_is(req->method, "GET"))
		return DECISION_BAD_ENDPOINT;
	if (decision_str_is(req->path, "/tally/v1/usage"))
		return DECISION_USAGE_REPORTED;
	if (decision_str_is(req->path, "/tally/v1/usage/end_users"))
		return decision_page(req, d);
	return DECISION_BAD_ENDPOINT;
}

/* Where a decision stops to ask who made a stored response id (len bytes): the
 * caller's answer finishes it (decision_owned_by); without one the id is unknown. */
static enum decision_verdict decision_ask_owner(struct decision *d, enum decision_owner_of of,
                                                const char *id, size_t len)
{
	snprintf(d->response_id, sizeof(d->response_id), "%.*s", (int)len, id);
	d->owner_query = of;
	return DECISION_UNKNOWN_RESPONSE;
}

/* Whether d's key made the id o answers for: DECISION_ALLOW, or
 * DECISION_UNKNOWN_RESPONSE, for an id another key made as for one nobody did; then
 * d->wait says whether the key has creates whose records may still bring it. */
static enum decision_verdict decision_owner_is_key(const struct decision_owner *o,
                                                   struct decision *d)
{
	if (!o->known) {
		d->wait = o->pending;
		return DECISION_UNKNOWN_RESPONSE;
	}
	return o->e.key_id == d->key->id ? DECISION_ALLOW : DECISION_UNKNOWN_RESPONSE;
}

/* A stored response's own paths: GET and DELETE /v1/responses/ID, POST .../ID/cancel
 * and GET .../ID/input_items. Only the key that made ID reaches it (owner.h): for any
 * other, and for an ID no key made, it does not exist. Routed to the provider of the
 * model that made it; the answers hold the response's usage, which was billed when it
 * was made: unbilled. */
static const struct decision_stored_path {
	const char *method;
	const char *tail;       /* after the ID: "" or a sub-path */
} decision_stored_paths[] = {
	{ "GET", "" }, { "DELETE", "" }, { "POST", "/cancel" }, { "GET", "/input_items" },
};

/* The ID of a stored response's path (/v1/responses/ID...), and in *tail what follows
 * it ("" or a sub-path). */
static struct spop_str decision_stored_id(const struct decision_request *req,
                                          struct spop_str *tail)
{
	const size_t n = sizeof("/v1/responses/") - 1;
	struct spop_str id = { req->path.ptr + n, req->path.len - n };
	const char *slash;

	if ((slash = memchr(id.ptr, '/', id.len))) {
		tail->ptr = slash;
		tail->len = id.len - (size_t)(slash - id.ptr);
		id.len = (size_t)(slash - id.ptr);
	}
	return id;
}

static enum decision_verdict decision_stored(const struct decision_request *req,
                                             struct decision *d)
{
	static const char base[] = "/v1/responses/";
	const size_t n = sizeof(base) - 1;
	struct spop_str id, tail = { "", 0 };
	size_t i;
	int ok = 0;

	if (!decision_str_begins(req->path, base) || req->path.len == n)
		return DECISION_BAD_ENDPOINT;
	id = decision_stored_id(req, &tail);
	for (i = 0; i < sizeof(decision_stored_paths) / sizeof(decision_stored_paths[0]); i++)
		ok |= decision_str_is(req->method, decision_stored_paths[i].method) &&
		      decision_str_is(tail, decision_stored_paths[i].tail);
	if (!ok || !id.len)
		return DECISION_BAD_ENDPOINT;
	d->unbilled = 1;
	return decision_ask_owner(d, DECISION_OWNER_PATH, id.ptr, id.len);
}

/* A stored response's path whose owner is known: routed to the provider of the model
 * that made it. */
static enum decision_verdict decision_stored_owned(const struct keytable *t,
                                                   const struct decision_owner *o,
                                                   struct decision *d)
{
	enum decision_verdict v;

	if ((v = decision_owner_is_key(o, d)) != DECISION_ALLOW)
		return v;
	d->model = keytable_find_model(t, o->e.model, strlen(o->e.model));
	return d->model && d->model->provider ? DECISION_ALLOW : DECISION_NO_ROUTE;
}

/* Whether list (comma-separated) names tier. */
static int decision_listed(const char *list, const char *tier)
{
	const char *name;
	size_t len, n = strlen(tier);

	while ((name = tier_list_next(&list, &len)))
		if (len == n && memcmp(name, tier, n) == 0)
			return 1;
	return 0;
}

/* Whether lines (names each ended by a newline) holds name. */
static int decision_line_in(const char *lines, const char *name)
{
	size_t n = strlen(name);

	for (; *lines; lines = strchr(lines, '\n') + 1)
		if (strncmp(lines, name, n) == 0 && lines[n] == '\n')
			return 1;
	return 0;
}

/* What a request may ask for that costs more, as the key's policy and the model's prices
 * decide it (docs/pricing.md). A model without any price stays as it was, its rows
 * unpriced: "priced" judges the card of the tier asked for. Web searches are counted,
 * by Anthropic in its usage, on OpenAI's API by the capture filter (count_searches). */
struct decision_grant {
	const char *tiers;          /* the key's or the agent's list; NULL or "": any */
	int priced;                 /* the model has a price */
	int other_tools;            /* tools the provider runs other than a web search */
	int web_search;
	int audio;                  /* audio output */
	int audio_in;
	int cache_write;            /* prompt cache writes */
};

static void decision_grant_of(const struct decision_request *req, const struct decision *d,
                              const struct price_card *c, struct decision_grant *g)
{
	static const struct decision_policy none = { NULL, KT_POLICY_PRICED, KT_POLICY_PRICED,
	                                             KT_POLICY_ALLOW, 0 };
	const struct decision_policy *p = req->policy ? req->policy : &none;
	enum kt_policy tools = d->key->server_tools ? d->key->server_tools : p->server_tools;
	enum kt_policy audio = d->key->audio ? d->key->audio : p->audio;
	enum kt_policy writes = d->key->cache_writes ? d->key->cache_writes : p->cache_writes;

	g->tiers = d->key->service_tiers ? d->key->service_tiers : p->service_tiers;
	g->priced = d->model->prices.ncards > 0;
	g->other_tools = tools == KT_POLICY_ALLOW || (tools != KT_POLICY_DENY && !g->priced);
	g->web_search = g->other_tools ||
	                (tools != KT_POLICY_DENY && c && c->micros[PRICE_WEB_SEARCH] != PRICE_UNSET);
	g->audio = audio == KT_POLICY_ALLOW ||
	           (audio != KT_POLICY_DENY &&
	            (!g->priced || (c && c->micros[PRICE_AUDIO_OUTPUT] != PRICE_UNSET)));
	g->audio_in = audio == KT_POLICY_ALLOW ||
	              (audio != KT_POLICY_DENY &&
	               (!g->priced || (c && c->micros[PRICE_AUDIO_INPUT] != PRICE_UNSET)));
	g->cache_write = writes == KT_POLICY_ALLOW ||
	                 (writes != KT_POLICY_DENY &&
	                  (!g->priced || (c && c->micros[PRICE_CACHE_WRITE] != PRICE_UNSET)));
}

/* Whether a request may ask for tier (a name price_tier_name takes) under g. */
static int decision_tier_granted(const struct decision *d, const struct decision_grant *g,
                                 const char *tier)
{
	tier = price_tier_name(tier);
	return (!g->tiers || !*g->tiers || decision_listed(g->tiers, tier)) &&
	       (!g->priced || price_pick(&d->model->prices, tier, -1));
}

/* What of the request the key may not ask for, or the gateway could not price; 0:
 * nothing. */
static enum decision_costly decision_costly(const struct decision_request *req,
                                            const struct decision *d)
{
	const struct price_card *c = price_pick(&d->model->prices, d->body.service_tier, -1);
	struct decision_grant g;

	decision_grant_of(req, d, c, &g);
	if (d->body.tier_unknown || !decision_tier_granted(d, &g, d->body.service_tier))
		return DECISION_COSTLY_TIER;
	if (((d->body.server_tools & REQBODY_TOOL_OTHER) && !g.other_tools) ||
	    ((d->body.server_tools & REQBODY_TOOL_WEB_SEARCH) && !g.web_search))
		return DECISION_COSTLY_TOOLS;
	if ((d->body.audio_out && !g.audio) || (d->body.audio_in && !g.audio_in))
		return DECISION_COSTLY_AUDIO;
	if (d->body.cache_write && !g.cache_write)
		return DECISION_COSTLY_CACHE;
	return 0;
}

/* Adds tier to d->tiers_scan (a line each, *off bytes so far) when g grants it and it
 * is not there yet. */
static void decision_tier_scan_add(struct decision *d, const struct decision_grant *g,
                                   const char *tier, size_t *off)
{
	size_t n = strlen(tier);

	if (decision_tier_granted(d, g, tier) && !decision_line_in(d->tiers_scan, tier) &&
	    *off + n + 2 <= sizeof(d->tiers_scan)) {
		memcpy(d->tiers_scan + *off, tier, n);
		d->tiers_scan[*off + n] = '\n';
		d->tiers_scan[*off += n + 1] = '\0';
	}
}

/* For a cut body, what the capture filter refuses past the cut (haproxy/capture.lua):
 * d->costly_scan holds 'o' (tools the provider runs), 'w' (web searches), 'a' (audio)
 * for each that is not granted, and d->tiers_scan the service_tier values that are, one
 * a line ("" when any is). The card is the one of the tier seen before the cut. */
static void decision_costly_scan(const struct decision_request *req, struct decision *d)
{
	/* What requests and answers call the default tier (price_tier_name). */
	static const char *const aliases[] = { "default", "auto", "standard", "standard_only" };
	enum { DECISION_ALIASES = sizeof(aliases) / sizeof(aliases[0]) };
	const struct price_card *c = price_pick(&d->model->prices, d->body.service_tier, -1);
	const char *list, *listed;
	struct decision_grant g;
	char *f = d->costly_scan;
	size_t i, n, off = 0;

	decision_grant_of(req, d, c, &g);
	if (!g.other_tools)
		*f++ = 'o';
	if (!g.web_search)
		*f++ = 'w';
	if (!g.audio)
		*f++ = 'a';
	*f = '\0';
	d->tiers_scan[0] = '\0';
	if (!g.priced && (!g.tiers || !*g.tiers))
		return;
	/* Every name a card or the list could grant; a name that fits no line is left out,
	 * and so refused. */
	for (i = 0; i < DECISION_ALIASES + d->model->prices.ncards; i++)
		decision_tier_scan_add(d, &g, i < DECISION_ALIASES
		                                  ? aliases[i]
		                                  : d->model->prices.cards[i - DECISION_ALIASES].tier,
		                       &off);
	for (list = g.tiers; (listed = tier_list_next(&list, &n));) {
		char name[TIER_NAME_MAX];

		if (n < sizeof(name)) {
			memcpy(name, listed, n);
			name[n] = '\0';
			decision_tier_scan_add(d, &g, name, &off);
		}
	}
}

/* What an allowed request's answer needs: how it is read, and the stream's amendment. */
static enum decision_verdict decision_finish(const struct decision_request *req,
                                             const struct decision_endpoint *ep,
                                             struct decision *d)
{
	/* Unary JSON that fits the buffer is read by HAProxy's json_query at no Lua cost;
	 * everything else meets the capture filter: streams, vectors, bodies seen in part
	 * (a second max_tokens may follow the cut), and answers the request does not bound
	 * below the buffer (usage comes last, after the text, and json_query sees only
	 * what the buffer holds). A count of tokens has no usage to read. */
	d->unbilled = ep->unbilled;
	/* Codex CLI sends store false: nothing to own, nothing to keep a place for. */
	d->creates_response = decision_str_is(req->path, "/v1/responses") &&
	                      !(d->body.store_off && !d->body.store_ambiguous);
	d->max_output = ep->output_bound ? d->body.max_output_tokens : d->body.max_tokens;
	d->capture = d->body_truncated ||
	             (!ep->unbilled && (d->stream != 0 || ep->large ||
	                                !decision_json_holds(req, ep->echoes, d->max_output) ||
	                                d->body.many_outputs || d->body.hints_ambiguous));
	/* OpenAI counts its web searches nowhere in the usage: the capture filter counts
	 * them in the answer of a request that may have asked for one. */
	d->count_searches = !ep->unbilled && d->model->provider->api == KT_API_OPENAI &&
	                    ((d->body.server_tools & REQBODY_TOOL_WEB_SEARCH) || d->body_truncated);
	d->capture |= d->count_searches;
	if (ep->stream_options)
		decision_amend(d);
	else if (d->body_truncated)
		d->amend_scan = 1;   /* the capture filter checks the rest: nothing to amend */
	return DECISION_ALLOW;
}

/* A body naming a previous_response_id whose owner is known: served when the key made
 * it on the provider of the model asked for. */
static enum decision_verdict decision_previous_owned(const struct keytable *t,
                                                     const struct decision_request *req,
                                                     const struct decision_endpoint *ep,
                                                     const struct decision_owner *o,
                                                     struct decision *d)
{
	const struct kt_model *made;

	/* Made on another provider, the id names nothing this route can read. */
	if (decision_owner_is_key(o, d) != DECISION_ALLOW ||
	    !(made = keytable_find_model(t, o->e.model, strlen(o->e.model))) ||
	    made->provider != d->model->provider)
		return DECISION_UNKNOWN_RESPONSE;
	d->previous_tokens = o->e.tokens;
	return decision_finish(req, ep, d);
}

/* The end user a request names: its X-Tally-User header, else the member of its
 * endpoint's API in the body (reqbody.h), checked against the key's policy. A body cut
 * before the member names none: a key that requires one is refused, and told of the
 * header. */
static enum decision_verdict decision_end_user(const struct decision_request *req,
                                               const struct decision_endpoint *ep,
                                               struct decision *d)
{
	const struct reqbody_end_user *eu = ep->api == KT_API_ANTHROPIC ? &d->body.anthropic_user
	                                                                : &d->body.openai_user;

	d->end_user_header = req->end_user_headers > 0;
	d->end_user_api = ep->api;
	if (d->key->end_users == KT_END_USERS_FORBIDDEN &&
	    (d->end_user_header || eu->state != REQBODY_END_USER_NONE))
		return DECISION_END_USER_FORBIDDEN;
	if (d->end_user_header) {
		if (req->end_user_headers > 1 || !enduser_id_ok(req->end_user.ptr, req->end_user.len))
			return DECISION_BAD_END_USER;
		memcpy(d->end_user, req->end_user.ptr, req->end_user.len);
		d->end_user[req->end_user.len] = '\0';
	} else if (eu->state == REQBODY_END_USER_BAD) {
		return DECISION_BAD_END_USER;
	} else if (eu->state == REQBODY_END_USER_OK) {
		memcpy(d->end_user, eu->id, sizeof(d->end_user));
	}
	if (!d->end_user[0] && d->key->end_users == KT_END_USERS_REQUIRED)
		return DECISION_END_USER_REQUIRED;
	return DECISION_ALLOW;
}

/* Whether the key fixes tag t (its own fixed tags or its team's). */
static int decision_tag_fixed(const struct decision *d, const struct tags_tag *t)
{
	const struct tags *f = d->key->fixed_tags;
	size_t i;

	for (i = 0; f && i < f->n; i++)
		if (strcmp(f->t[i].name, t->name) == 0)
			return strcmp(f->t[i].value, t->value) == 0;
	return 0;
}

/* The request's tags: its X-Tally-Tags header (sent once) with its key's fixed tags,
 * which it may repeat but not change; and those of them with a budget in kt. A tag with
 * a budget is carried only by keys that fix it: any key could otherwise spend, and so
 * close, the budget of a project it is not part of. */
static enum decision_verdict decision_tags(const struct keytable *kt,
                                           const struct decision_request *req,
                                           struct decision *d)
{
	char one[TAGS_TAG_MAX];
	struct tags t;
	size_t i;

	if (d->key->fixed_tags_over)
		d->tags_status = TAGS_TOO_MANY;
	else if (req->tags_headers > 1)
		d->tags_status = TAGS_MALFORMED;
	else if (req->tags.len > TAGS_HEADER_MAX)
		d->tags_status = TAGS_TOO_LONG;
	else
		d->tags_status = tags_parse(req->tags.ptr, req->tags.len, &t);
	if (d->tags_status == TAGS_OK && d->key->fixed_tags)
		d->tags_status = tags_fix(&t, d->key->fixed_tags);
	if (d->tags_status != TAGS_OK)
		return d->tags_status == TAGS_CONFLICT ? DECISION_TAG_CONFLICT : DECISION_BAD_TAGS;
	tags_format(&t, d->tags, sizeof(d->tags));
	for (i = 0; kt->ntag_budgets && i < t.n; i++) {
		int n = snprintf(one, sizeof(one), "%s=%s", t.t[i].name, t.t[i].value);
		const struct kt_tag_budget *b = keytable_find_tag_budget(kt, one, (size_t)n);

		if (!b)
			continue;
		if (!decision_tag_fixed(d, &t.t[i])) {
			d->refusing_tag = b;
			return DECISION_TAG_NOT_ALLOWED;
		}
		d->tag_budgets[d->ntag_budgets++] = b;
	}
	return DECISION_ALLOW;
}

static enum decision_verdict decision_judge(const struct keytable *t,
                                            const struct decision_request *req,
                                            struct decision *d)
{
	struct spop_str key = decision_find_key(req);
	const struct decision_endpoint *ep;
	enum decision_verdict v;

	if (!key.len)
		return DECISION_NO_KEY;
	d->key = keytable_find_key(t, key.ptr, key.len);
	if (!d->key)
		return DECISION_UNKNOWN_KEY;
	if (d->key->revoked)
		return DECISION_REVOKED_KEY;
	/* HAProxy refuses such bodies too (tally.cfg, TALLY_MAX_BODY); this holds when
	 * its cap is set higher, and for bodies it does not see whole first. */
	if (req->policy && req->policy->max_body > 0 && req->body_size > req->policy->max_body) {
		d->over_cap = req->policy->max_body;
		return DECISION_BODY_TOO_LARGE;
	}
	if (decision_str_begins(req->path, "/tally/"))
		return decision_own_path(req, d);
	if (!(ep = decision_find_endpoint(req)))
		return decision_str_begins(req->path, "/v1/responses/") ? decision_stored(req, d)
		                                                          : decision_models(t, req, d);
	v = decision_pick_model(t, req, ep, d);
	if (v != DECISION_ALLOW || (v = decision_end_user(req, ep, d)) != DECISION_ALLOW ||
	    (v = decision_tags(t, req, d)) != DECISION_ALLOW)
		return v;
	/* previous_response_id and conversation name responses and conversations stored
	 * under the operator's account, shared by every key: one key could read another's.
	 * The gateway knows which key made which response (owner.h), so one plain
	 * previous_response_id in a body seen whole is served to the key that made it;
	 * conversations, which it does not serve, and any other form are refused. A cut
	 * body is checked past the cut by the capture filter. */
	if (ep->stored_state && d->body.stateful &&
	    (d->body.stateful_other || !d->body.previous_response_id[0] || d->body_truncated))
		return DECISION_STORED_STATE;
	/* A background response's usage comes only to later reads, which bill nothing; a
	 * request_id is the response's id on some servers, which a key must not choose. */
	if (ep->stored_state && d->body.unaccountable)
		return DECISION_STORED_STATE;
	/* An item_reference names an output item, whose response the gateway cannot tell
	 * (it keeps the owners of response ids only): any key's item could be read. */
	if (ep->stored_state && d->body.item_reference)
		return DECISION_STORED_STATE;
	d->stateless_scan = ep->stored_state && d->body_truncated;
	if (!keytable_key_allows(d->key, d->model))
		return keytable_key_own_allows(d->key, d->model) ? DECISION_TEAM_MODEL_FORBIDDEN
		                                                 : DECISION_MODEL_FORBIDDEN;
	if (!d->model->provider)
		return DECISION_NO_ROUTE;
	if (d->model->provider->api != ep->api)
		return DECISION_WRONG_API;
	/* A count of tokens bills nothing: whatever it names costs nothing yet. */
	if (!ep->unbilled && (d->costly = decision_costly(req, d)))
		return DECISION_COST_POLICY;
	if (!ep->unbilled && d->body_truncated)
		decision_costly_scan(req, d);
	if (ep->stored_state && d->body.stateful)
		return decision_ask_owner(d, DECISION_OWNER_PREVIOUS, d->body.previous_response_id,
		                          strlen(d->body.previous_response_id));
	return decision_finish(req, ep, d);
}

/* Tokens at a price of micro-dollars per Mtok, rounded up: a reservation errs high. */
static int64_t decision_cost_of(int64_t tokens, int64_t micros_per_mtok)
{
	__int128 cost;

	if (micros_per_mtok <= 0 || tokens <= 0)
		return 0;
	cost = ((__int128)tokens * micros_per_mtok + 999999) / 1000000;
	return cost > DECISION_ESTIMATE_MAX ? DECISION_ESTIMATE_MAX : (int64_t)cost;
}

void decision_estimate(struct decision *d, const struct decision_request *req,
                       int64_t default_max_tokens)
{
	int64_t bytes = req->body_size > (int64_t)req->body.len ? req->body_size
	                                                         : (int64_t)req->body.len;
	/* ~4 bytes per token of English text; JSON's own bytes make it err high. The size
	 * is the client's Content-Length: capped before any arithmetic. */
	int64_t prompt = (bytes > DECISION_ESTIMATE_MAX ? DECISION_ESTIMATE_MAX : bytes + 3) / 4 +
	                 (d->previous_tokens < DECISION_ESTIMATE_MAX ? d->previous_tokens
	                                                             : DECISION_ESTIMATE_MAX) +
	                 /* Inputs given by reference are none of the body's bytes. */
	                 (int64_t)d->body.url_images * DECISION_URL_IMAGE_TOKENS +
	                 (int64_t)d->body.url_files * DECISION_URL_FILE_TOKENS;
	/* No bound named: the model's largest answer, else the agent's default. */
	int64_t out = d->max_output >= 0 ? d->max_output
	              : d->model && d->model->max_output > 0 ? d->model->max_output
	                                                       : default_max_tokens;
	unsigned fb = 0;

	if (d->unbilled)
		prompt = out = 0;
	d->est_prompt_tokens = prompt;
	d->est_completion_tokens = out;
	d->est_tokens = prompt + out;
	if (d->model)
		d->est_card = d->allow_scan && !d->scan_route_only
		              ? decision_dearest(d, d->model->provider, prompt)
		              : decision_card(d->model, d, prompt);
	/* An input or output price the card lacks is reserved at its fallback, as the
	 * row will be charged (price.h). */
	d->est_cost_micros = d->model ? decision_cost_of(prompt, price_rate(&d->est_card, PRICE_INPUT, &fb)) +
	                                decision_cost_of(out, price_rate(&d->est_card, PRICE_OUTPUT, &fb)) : 0;
}

void decision_limit(struct decision *d, enum quota_verdict v, enum quota_level level)
{
	static const enum decision_verdict of[QUOTA_LEVEL_TEAM_MODEL + 1][QUOTA_BUDGET + 1] = {
		[QUOTA_LEVEL_KEY] = {
			[QUOTA_OK] = DECISION_ALLOW,
			[QUOTA_RPM] = DECISION_RPM_LIMITED,
			[QUOTA_TPM] = DECISION_TPM_LIMITED,
			[QUOTA_CONCURRENCY] = DECISION_CONCURRENCY_LIMITED,
			[QUOTA_BUDGET] = DECISION_BUDGET_EXCEEDED,
		},
		[QUOTA_LEVEL_TEAM] = {
			[QUOTA_OK] = DECISION_ALLOW,
			[QUOTA_RPM] = DECISION_TEAM_RPM_LIMITED,
			[QUOTA_TPM] = DECISION_TEAM_TPM_LIMITED,
			[QUOTA_CONCURRENCY] = DECISION_TEAM_CONCURRENCY_LIMITED,
			[QUOTA_BUDGET] = DECISION_TEAM_BUDGET_EXCEEDED,
		},
		[QUOTA_LEVEL_TAG] = {
			[QUOTA_OK] = DECISION_ALLOW,
			[QUOTA_RPM] = DECISION_TAG_BUDGET_EXCEEDED,
			[QUOTA_TPM] = DECISION_TAG_BUDGET_EXCEEDED,
			[QUOTA_CONCURRENCY] = DECISION_TAG_BUDGET_EXCEEDED,
			[QUOTA_BUDGET] = DECISION_TAG_BUDGET_EXCEEDED,
		},
		[QUOTA_LEVEL_END_USER] = {
			[QUOTA_OK] = DECISION_ALLOW,
			[QUOTA_RPM] = DECISION_END_USER_RPM_LIMITED,
			[QUOTA_TPM] = DECISION_END_USER_TPM_LIMITED,
			[QUOTA_CONCURRENCY] = DECISION_END_USER_RPM_LIMITED,
			[QUOTA_BUDGET] = DECISION_END_USER_BUDGET_EXCEEDED,
		},
		/* A budget alone: nothing else refuses there. */
		[QUOTA_LEVEL_KEY_MODEL] = {
			[QUOTA_OK] = DECISION_ALLOW,
			[QUOTA_RPM] = DECISION_MODEL_BUDGET_EXCEEDED,
			[QUOTA_TPM] = DECISION_MODEL_BUDGET_EXCEEDED,
			[QUOTA_CONCURRENCY] = DECISION_MODEL_BUDGET_EXCEEDED,
			[QUOTA_BUDGET] = DECISION_MODEL_BUDGET_EXCEEDED,
		},
		[QUOTA_LEVEL_TEAM_MODEL] = {
			[QUOTA_OK] = DECISION_ALLOW,
			[QUOTA_RPM] = DECISION_TEAM_MODEL_BUDGET_EXCEEDED,
			[QUOTA_TPM] = DECISION_TEAM_MODEL_BUDGET_EXCEEDED,
			[QUOTA_CONCURRENCY] = DECISION_TEAM_MODEL_BUDGET_EXCEEDED,
			[QUOTA_BUDGET] = DECISION_TEAM_MODEL_BUDGET_EXCEEDED,
		},
	};

	/* A budget's share held up is one verdict at every level: nothing is spent. */
	if (v == QUOTA_BUDGET_PENDING && (unsigned)level <= QUOTA_LEVEL_TEAM_MODEL)
		d->verdict = DECISION_BUDGET_PENDING;
	else
		d->verdict = (unsigned)level <= QUOTA_LEVEL_TEAM_MODEL && (unsigned)v <= QUOTA_BUDGET
		             ? of[level][v] : DECISION_AGENT_ERROR;
	/* A refusal the table does not map (an entry left out reads 0) admits nothing. */
	if (v != QUOTA_OK && d->verdict == DECISION_ALLOW)
		d->verdict = DECISION_AGENT_ERROR;
}

void decision_make(const struct keytable *t, const struct decision_request *req,
                   struct decision *d)
{
	memset(d, 0, sizeof(*d));
	d->stream = -1;
	d->max_output = -1;
	d->verdict = decision_judge(t, req, d);
}

void decision_owned_by(const struct keytable *t, const struct decision_request *req,
                       const struct decision_owner *o, struct decision *d)
{
	if (d->owner_query == DECISION_OWNER_PATH)
		d->verdict = decision_stored_owned(t, o, d);
	else if (d->owner_query == DECISION_OWNER_PREVIOUS)
		d->verdict = decision_previous_owned(t, req, decision_find_endpoint(req), o, d);
}

struct spop_str decision_owner_id(const struct decision *d, const struct decision_request *req)
{
	struct spop_str tail, none = { NULL, 0 };

	if (d->owner_query == DECISION_OWNER_PATH)
		return decision_stored_id(req, &tail);
	if (d->owner_query == DECISION_OWNER_PREVIOUS)
		return (struct spop_str){ d->body.previous_response_id,
		                          strlen(d->body.previous_response_id) };
	return none;
}

size_t decision_scan_list(const struct decision *d, char *buf, size_t cap)
{
	size_t n = strlen(d->model->name);

	if (!d->scan_route_only)
		return decision_allow_list(d->key, d->model->provider, buf, cap);
	if (n < cap)
		memcpy(buf, d->model->name, n + 1);
	return n;
}

size_t decision_allow_list(const struct kt_key *k, const struct kt_provider *p, char *buf,
                           size_t cap)
{
	size_t i, len = 0;

	for (i = 0; i < k->nallowed; i++) {
		const struct kt_model *m = k->allowed[i];
		size_t n = strlen(m->name);

		if (m->provider != p || !decision_name_plain(m->name))
			continue;
		if (len + (len > 0) + n < cap) {
			if (len > 0)
				buf[len] = '\n';
			memcpy(buf + len + (len > 0), m->name, n);
			buf[len + (len > 0) + n] = '\0';
		}
		len += (len > 0) + n;
	}
	return len;
}

int64_t decision_key_active(const struct keytable *t, const struct decision_request *req)
{
	struct spop_str key = decision_find_key(req);
	const struct kt_key *k = key.len ? keytable_find_key(t, key.ptr, key.len) : NULL;

	return k && !k->revoked ? k->id : 0;
}
