/* wording: what the gateway tells a client about a decision: the JSON error body of a
 * denial and its message, and the model list it answers itself (I/O threads, pure).
 * The verdict's name and status are decision.c's. */
#include "wording.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "keytable.h"
#include "quota.h"
#include "tz.h"

/* The error "type" of each verdict in OpenAI's shape and in Anthropic's. */
struct wording_types {
	const char *openai_type;
	const char *anthropic_type;
};

static const struct wording_types wording_types[DECISION_VERDICT_COUNT] = {
	[DECISION_ALLOW] = { "", "" },
	[DECISION_NO_KEY] = { "invalid_request_error", "authentication_error" },
	[DECISION_UNKNOWN_KEY] = { "invalid_request_error", "authentication_error" },
	[DECISION_REVOKED_KEY] = { "invalid_request_error", "authentication_error" },
	[DECISION_BAD_ENDPOINT] = { "invalid_request_error", "not_found_error" },
	[DECISION_BAD_BODY] = { "invalid_request_error", "invalid_request_error" },
	[DECISION_MODEL_REQUIRED] = { "invalid_request_error", "invalid_request_error" },
	[DECISION_UNKNOWN_MODEL] = { "invalid_request_error", "not_found_error" },
	[DECISION_MODEL_FORBIDDEN] = { "permission_error", "permission_error" },
	[DECISION_BODY_TOO_LARGE] = { "invalid_request_error", "request_too_large" },
	[DECISION_WRONG_API] = { "invalid_request_error", "invalid_request_error" },
	[DECISION_NO_ROUTE] = { "server_error", "api_error" },
	[DECISION_AGENT_ERROR] = { "server_error", "api_error" },
	[DECISION_RPM_LIMITED] = { "rate_limit_error", "rate_limit_error" },
	[DECISION_TPM_LIMITED] = { "rate_limit_error", "rate_limit_error" },
	[DECISION_CONCURRENCY_LIMITED] = { "rate_limit_error", "rate_limit_error" },
	[DECISION_BUDGET_EXCEEDED] = { "insufficient_quota", "billing_error" },
	[DECISION_UNAUTHENTICATED] = { "server_error", "api_error" },
	[DECISION_BUSY] = { "server_error", "overloaded_error" },
	[DECISION_MODELS_LISTED] = { "", "" },
	[DECISION_STORED_STATE] = { "invalid_request_error", "invalid_request_error" },
	[DECISION_UNKNOWN_RESPONSE] = { "invalid_request_error", "not_found_error" },
	[DECISION_COST_POLICY] = { "invalid_request_error", "invalid_request_error" },
	[DECISION_TEAM_MODEL_FORBIDDEN] = { "permission_error", "permission_error" },
	[DECISION_TEAM_RPM_LIMITED] = { "rate_limit_error", "rate_limit_error" },
	[DECISION_TEAM_TPM_LIMITED] = { "rate_limit_error", "rate_limit_error" },
	[DECISION_TEAM_CONCURRENCY_LIMITED] = { "rate_limit_error", "rate_limit_error" },
	[DECISION_TEAM_BUDGET_EXCEEDED] = { "insufficient_quota", "billing_error" },
	[DECISION_USAGE_REPORTED] = { "", "" },
	[DECISION_USAGE_UNAVAILABLE] = { "server_error", "overloaded_error" },
	[DECISION_END_USER_REQUIRED] = { "invalid_request_error", "invalid_request_error" },
	[DECISION_END_USER_FORBIDDEN] = { "invalid_request_error", "invalid_request_error" },
	[DECISION_BAD_END_USER] = { "invalid_request_error", "invalid_request_error" },
	[DECISION_BAD_QUERY] = { "invalid_request_error", "invalid_request_error" },
	[DECISION_BAD_TAGS] = { "invalid_request_error", "invalid_request_error" },
	[DECISION_TAG_CONFLICT] = { "invalid_request_error", "invalid_request_error" },
	[DECISION_TAG_BUDGET_EXCEEDED] = { "insufficient_quota", "billing_error" },
	[DECISION_TAG_NOT_ALLOWED] = { "permission_error", "permission_error" },
	[DECISION_END_USER_RPM_LIMITED] = { "rate_limit_error", "rate_limit_error" },
	[DECISION_END_USER_TPM_LIMITED] = { "rate_limit_error", "rate_limit_error" },
	[DECISION_END_USER_BUDGET_EXCEEDED] = { "insufficient_quota", "billing_error" },
	[DECISION_MODEL_BUDGET_EXCEEDED] = { "insufficient_quota", "billing_error" },
	[DECISION_TEAM_MODEL_BUDGET_EXCEEDED] = { "insufficient_quota", "billing_error" },
	[DECISION_BUDGET_PENDING] = { "rate_limit_error", "rate_limit_error" },
};

/* Whether s begins with lit. */
static int wording_begins(struct spop_str s, const char *lit)
{
	size_t n = strlen(lit);

	return s.len >= n && memcmp(s.ptr, lit, n) == 0;
}

/* Appends s as JSON string content (without quotes), truncating at 200 bytes: error
 * messages quote client input and must stay small. */
static void wording_json_escape(char *out, size_t cap, const char *s)
{
	size_t o = 0, i;

	for (i = 0; s[i] && i < 200 && o + 7 < cap; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\') {
			out[o++] = '\\';
			out[o++] = (char)c;
		} else if (c < 0x20 || c == 0x7f) {
			o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
		} else if (c >= 0x80) {
			out[o++] = '?';   /* client bytes need not be UTF-8; the answer must be */
		} else {
			out[o++] = (char)c;
		}
	}
	out[o] = '\0';
}

/* An end user's id (enduser_id_ok: UTF-8 without control characters) as JSON string
 * content into out (3 * ACCT_END_USER_MAX bytes hold any): quotes and backslashes
 * escaped, U+2028 and U+2029 too (as queryd writes them), the rest as it is. */
static void wording_json_id(char *out, size_t cap, const char *s)
{
	size_t o = 0;

	for (; *s && o + 7 < cap; s++) {
		if (*s == '"' || *s == '\\') {
			out[o++] = '\\';
			out[o++] = *s;
		} else if ((unsigned char)s[0] == 0xe2 && (unsigned char)s[1] == 0x80 &&
		           ((unsigned char)s[2] == 0xa8 || (unsigned char)s[2] == 0xa9)) {
			o += (size_t)snprintf(out + o, cap - o, "\\u202%c", s[2] == (char)0xa8 ? '8' : '9');
			s += 2;
		} else {
			out[o++] = *s;
		}
	}
	out[o] = '\0';
}

/* The refusal of a limit of q, a key's or a team's (named by who, its kind of owner
 * by noun). */
static void wording_limit(const struct decision *d, const char *who, const struct quota_cfg *q,
                          const char *noun, char *msg, size_t cap)
{
	switch (d->verdict) {
	case DECISION_RPM_LIMITED:
	case DECISION_TEAM_RPM_LIMITED:
	case DECISION_END_USER_RPM_LIMITED:
		snprintf(msg, cap, "%s is limited to %lld requests per minute; retry after %lld s.",
		         who, (long long)q->rpm, (long long)d->quota.retry_after_s);
		break;
	case DECISION_TPM_LIMITED:
	case DECISION_TEAM_TPM_LIMITED:
	case DECISION_END_USER_TPM_LIMITED:
		snprintf(msg, cap, "%s is limited to %lld tokens per minute and this request may "
		         "use %lld (prompt and max_tokens); retry after %lld s.", who,
		         (long long)q->tpm, (long long)d->est_tokens,
		         (long long)d->quota.retry_after_s);
		break;
	case DECISION_CONCURRENCY_LIMITED:
	case DECISION_TEAM_CONCURRENCY_LIMITED:
		snprintf(msg, cap, "%s is limited to %lld requests in flight.", who,
		         (long long)q->max_concurrent);
		break;
	default:
		snprintf(msg, cap, "%s has spent its budget of $%lld.%06lld for this %s.", who,
		         (long long)(q->budget_micros / 1000000), (long long)(q->budget_micros % 1000000),
		         q->period == QUOTA_PERIOD_TOTAL ? noun : quota_period_name(q->period));
		break;
	}
}

/* The body's member that names an end user in the request's API. */
static const char *wording_end_user_member(const struct decision *d)
{
	return d->end_user_api == KT_API_ANTHROPIC ? "metadata.user_id" : "safety_identifier or user";
}

static void wording_message(const struct decision *d, char *msg, size_t cap)
{
	/* who holds an end user's id escaped (wording_json_id) and a key's prefix */
	char model[2 * 6 * 40], team[96], user[3 * ACCT_END_USER_MAX], who[3 * ACCT_END_USER_MAX + 64];

	wording_json_escape(model, sizeof(model),
	                     d->model ? d->model->name : d->body.has_model ? d->body.model : "");
	switch (d->verdict) {
	case DECISION_NO_KEY:
		snprintf(msg, cap, "Missing gateway key: send it as 'Authorization: Bearer KEY' or 'x-api-key: KEY'.");
		break;
	case DECISION_UNKNOWN_KEY:
		snprintf(msg, cap, "Invalid gateway key.");
		break;
	case DECISION_REVOKED_KEY:
		snprintf(msg, cap, "Gateway key %s has been revoked.", d->key->prefix);
		break;
	case DECISION_BAD_BODY:
		snprintf(msg, cap, "Request body must be a JSON object with at most one string 'model' and one boolean 'stream'.");
		break;
	case DECISION_MODEL_REQUIRED:
		snprintf(msg, cap, "The request names no model and key %s has no default model.", d->key->prefix);
		break;
	case DECISION_UNKNOWN_MODEL:
		snprintf(msg, cap, "The model '%s' does not exist on this gateway.", model);
		break;
	case DECISION_MODEL_FORBIDDEN:
		snprintf(msg, cap, "Key %s may not use the model '%s'.", d->key->prefix, model);
		break;
	case DECISION_BODY_TOO_LARGE:
		if (d->over_cap) {
			snprintf(msg, cap, "The request body is larger than this gateway accepts (%lld bytes).",
			         (long long)d->over_cap);
			break;
		}
		snprintf(msg, cap, "Key %s is restricted to some models and the request body is larger than the gateway inspects; send a smaller body or ask the operator to raise tune.bufsize.", d->key->prefix);
		break;
	case DECISION_BAD_ENDPOINT:
		snprintf(msg, cap, "This gateway serves POST /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses, /v1/responses/compact, /v1/responses/input_tokens, /v1/messages and /v1/messages/count_tokens, GET /v1/models, and a stored response's GET and DELETE /v1/responses/ID, POST /v1/responses/ID/cancel and GET /v1/responses/ID/input_items.");
		break;
	case DECISION_WRONG_API:
		snprintf(msg, cap, "The model '%s' is served through %s.", model,
		         d->model->provider->api == KT_API_ANTHROPIC ? "/v1/messages" : "/v1/chat/completions");
		break;
	case DECISION_NO_ROUTE:
		snprintf(msg, cap, "The model '%s' has no provider configured.", model);
		break;
	case DECISION_AGENT_ERROR:
		snprintf(msg, cap, "The gateway could not read this request's details.");
		break;
	case DECISION_UNAUTHENTICATED:
		snprintf(msg, cap, "The gateway's HAProxy and its agent do not share the gateway secret.");
		break;
	case DECISION_BUSY:
		snprintf(msg, cap, "The gateway has too many requests in flight; retry shortly.");
		break;
	case DECISION_BUDGET_PENDING:
		snprintf(msg, cap, "A budget this request is charged to is shared by the gateway's nodes, and this node could not get its share in time; retry shortly.");
		break;
	case DECISION_USAGE_UNAVAILABLE:
		snprintf(msg, cap, "The gateway cannot read the key's usage right now; retry shortly.");
		break;
	case DECISION_END_USER_REQUIRED:
		snprintf(msg, cap, "Key %s must name the end user each request serves: send the X-Tally-User header, or %s in the body%s.",
		         d->key->prefix, wording_end_user_member(d),
		         d->body_truncated ? " before the part the gateway inspects ends" : "");
		break;
	case DECISION_END_USER_FORBIDDEN:
		snprintf(msg, cap, "Key %s may not name end users: send neither the X-Tally-User header nor %s in the body.",
		         d->key->prefix, wording_end_user_member(d));
		break;
	case DECISION_BAD_QUERY:
		snprintf(msg, cap, "A page of end users takes limit (1 to %d) and after (an end user's id, percent-encoded), each at most once, in a query of at most %d bytes.",
		         DECISION_PAGE_MAX, DECISION_QUERY_MAX);
		break;
	case DECISION_BAD_TAGS:
		if (d->key && d->key->fixed_tags_over) {
			snprintf(msg, cap, "Key %s and its team fix more tags together than a request may carry: %s.",
			         d->key->prefix, tags_status_text(TAGS_TOO_MANY));
			break;
		}
		snprintf(msg, cap, "The X-Tally-Tags header must come once, as at most %d bytes of tags: %s.",
		         TAGS_HEADER_MAX, tags_status_text(d->tags_status));
		break;
	case DECISION_TAG_BUDGET_EXCEEDED:
		if (d->refusing_tag) {
			snprintf(who, sizeof(who), "The tag %s", d->refusing_tag->tag);
			wording_limit(d, who, &d->refusing_tag->quota, "tag", msg, cap);
		} else {
			snprintf(msg, cap, "A tag of the request has spent its budget.");
		}
		break;
	case DECISION_TAG_NOT_ALLOWED:
		snprintf(msg, cap, "Key %s may not carry the tag %s: it has a budget, spent only by the keys that fix it (or whose team does).",
		         d->key->prefix, d->refusing_tag ? d->refusing_tag->tag : "");
		break;
	case DECISION_TAG_CONFLICT:
		snprintf(msg, cap, "Key %s fixes some of the request's tags to other values: %s.",
		         d->key->prefix, tags_status_text(d->tags_status));
		break;
	case DECISION_BAD_END_USER:
		snprintf(msg, cap, "The end user (%s) must be named once, as 1 to %d bytes of UTF-8 without control characters.",
		         d->end_user_header ? "the X-Tally-User header" : wording_end_user_member(d),
		         ACCT_END_USER_MAX - 1);
		break;
	case DECISION_UNKNOWN_RESPONSE:
		wording_json_escape(model, sizeof(model), d->response_id);
		snprintf(msg, cap, "No response found with id '%s'.", model);
		break;
	case DECISION_COST_POLICY:
		if (d->costly == DECISION_COSTLY_TIER)
			snprintf(msg, cap, "Key %s may not ask for this service_tier of the model '%s', or the gateway has no price for it.", d->key->prefix, model);
		else if (d->costly == DECISION_COSTLY_TOOLS)
			snprintf(msg, cap, "Key %s may not use tools the provider runs (web search, file search, code execution, MCP) with the model '%s', or the gateway cannot price them.", d->key->prefix, model);
		else if (d->costly == DECISION_COSTLY_CACHE)
			snprintf(msg, cap, "Key %s may not write the prompt cache (cache_control) of the model '%s', or the gateway has no price for cache writes.", d->key->prefix, model);
		else
			snprintf(msg, cap, "Key %s may not send audio to or ask for audio from the model '%s', or the gateway has no price for it.", d->key->prefix, model);
		break;
	case DECISION_STORED_STATE:
		snprintf(msg, cap, "This gateway serves Responses requests it can account and keep to their key: no conversation, background, request_id or item_reference input, and a previous_response_id only as one plain string made by the same key, in a body of at most the size it inspects.");
		break;
	case DECISION_TEAM_MODEL_FORBIDDEN:
		wording_json_escape(team, sizeof(team), d->key->team->name);
		snprintf(msg, cap, "The team '%s' of key %s may not use the model '%s'.", team,
		         d->key->prefix, model);
		break;
	case DECISION_RPM_LIMITED:
	case DECISION_TPM_LIMITED:
	case DECISION_CONCURRENCY_LIMITED:
	case DECISION_BUDGET_EXCEEDED:
		snprintf(who, sizeof(who), "Key %s", d->key->prefix);
		wording_limit(d, who, &d->key->quota, "key", msg, cap);
		break;
	case DECISION_TEAM_RPM_LIMITED:
	case DECISION_TEAM_TPM_LIMITED:
	case DECISION_TEAM_CONCURRENCY_LIMITED:
	case DECISION_TEAM_BUDGET_EXCEEDED:
		wording_json_escape(team, sizeof(team), d->key->team->name);
		snprintf(who, sizeof(who), "The team '%s' of key %s", team, d->key->prefix);
		wording_limit(d, who, &d->key->team->quota, "team", msg, cap);
		break;
	case DECISION_END_USER_RPM_LIMITED:
	case DECISION_END_USER_TPM_LIMITED:
	case DECISION_END_USER_BUDGET_EXCEEDED:
		wording_json_id(user, sizeof(user), d->end_user);
		snprintf(who, sizeof(who), "The end user '%s' of key %s", user, d->key->prefix);
		wording_limit(d, who, d->end_user_quota, "end user", msg, cap);
		break;
	/* The budget's model: a request routed to a dated snapshot is held at it. */
	case DECISION_MODEL_BUDGET_EXCEEDED:
		wording_json_escape(model, sizeof(model), d->key_model_budget->model);
		snprintf(who, sizeof(who), "Key %s, for the model '%s',", d->key->prefix, model);
		wording_limit(d, who, &d->key_model_budget->quota, "key", msg, cap);
		break;
	case DECISION_TEAM_MODEL_BUDGET_EXCEEDED:
		wording_json_escape(model, sizeof(model), d->team_model_budget->model);
		wording_json_escape(team, sizeof(team), d->key->team->name);
		snprintf(who, sizeof(who), "The team '%s' of key %s, for the model '%s',", team,
		         d->key->prefix, model);
		wording_limit(d, who, &d->team_model_budget->quota, "team", msg, cap);
		break;
	default:
		snprintf(msg, cap, "Request allowed.");
		break;
	}
}

int wording_error_json(const struct decision *d, const struct decision_request *req,
                       char *buf, size_t cap)
{
	enum decision_verdict v = (unsigned)d->verdict < DECISION_VERDICT_COUNT ? d->verdict
	                                                                     : DECISION_NO_ROUTE;
	const struct wording_types *vi = &wording_types[v];
	char msg[1024];
	int n;

	wording_message(d, msg, sizeof(msg));
	/* Anthropic's shape on its paths, and for a model list an Anthropic client asked for */
	if (wording_begins(req->path, "/v1/messages") ||
	    (wording_begins(req->path, "/v1/models") &&
	     decision_models_api(req) == KT_API_ANTHROPIC))
		n = snprintf(buf, cap, "{\"type\":\"error\",\"error\":{\"type\":\"%s\",\"message\":\"%s\"}}",
		             vi->anthropic_type, msg);
	else
		n = snprintf(buf, cap, "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":\"%s\"}}",
		             msg, vi->openai_type, decision_verdict_name(v));
	return n < 0 || (size_t)n >= cap ? -1 : n;
}

/* Room kept for the end of an Anthropic list: has_more and the first and last ids, each
 * escaped (wording_json_escape writes at most 7 bytes for each of 200). */
#define WORDING_MODELS_TAIL (2 * 1400 + 64)

/* One model as the client's API lists it; its length, or -1 if cap cannot hold it. */
static int wording_model_entry(const struct kt_model *m, int anthropic, char *buf, size_t cap)
{
	char name[1408], owner[1408], when[32];
	time_t at = (time_t)m->created_at;
	struct tm tm;
	int n;

	wording_json_escape(name, sizeof(name), m->name);
	if (anthropic) {
		if (!gmtime_r(&at, &tm) || !strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm))
			snprintf(when, sizeof(when), "1970-01-01T00:00:00Z");
		n = snprintf(buf, cap, "{\"type\":\"model\",\"id\":\"%s\",\"display_name\":\"%s\","
		             "\"created_at\":\"%s\"}", name, name, when);
	} else {
		wording_json_escape(owner, sizeof(owner), m->provider->name);
		n = snprintf(buf, cap, "{\"id\":\"%s\",\"object\":\"model\",\"created\":%lld,"
		             "\"owned_by\":\"%s\"}", name, (long long)m->created_at, owner);
	}
	return n < 0 || (size_t)n >= cap ? -1 : n;
}

int wording_models_json(const struct keytable *t, const struct decision *d,
                        const struct decision_request *req, char *buf, size_t cap)
{
	enum kt_api api = decision_models_api(req);
	int anthropic = api == KT_API_ANTHROPIC, more = 0, n;
	const struct kt_model *first = NULL, *last = NULL;
	char first_id[1408], last_id[1408];
	size_t len, i, room;

	if (d->model)
		return wording_model_entry(d->model, anthropic, buf, cap);
	if (cap <= WORDING_MODELS_TAIL + 32)
		return -1;
	room = cap - WORDING_MODELS_TAIL;
	len = (size_t)snprintf(buf, cap, anthropic ? "{\"data\":[" : "{\"object\":\"list\",\"data\":[");
	for (i = 0; i < t->nmodels; i++) {
		const struct kt_model *m = &t->models[i];

		if (!m->provider || m->provider->api != api || !keytable_key_allows(d->key, m))
			continue;
		n = wording_model_entry(m, anthropic, buf + len + (first != NULL), room - len - 1);
		if (n < 0) {
			more = 1;
			break;
		}
		if (first)
			buf[len++] = ',';
		len += (size_t)n;
		first = first ? first : m;
		last = m;
	}
	if (!anthropic)
		n = snprintf(buf + len, cap - len, "]}");
	else if (!first)
		n = snprintf(buf + len, cap - len, "],\"has_more\":false,\"first_id\":null,\"last_id\":null}");
	else {
		wording_json_escape(first_id, sizeof(first_id), first->name);
		wording_json_escape(last_id, sizeof(last_id), last->name);
		n = snprintf(buf + len, cap - len, "],\"has_more\":%s,\"first_id\":\"%s\",\"last_id\":\"%s\"}",
		             more ? "true" : "false", first_id, last_id);
	}
	return n < 0 || (size_t)n >= cap - len ? -1 : (int)(len + (size_t)n);
}

/* A time as RFC 3339 UTC into out (32 bytes), or "null" for none (< 0, or INT64_MAX). */
static void wording_time(char *out, size_t cap, int64_t ms)
{
	time_t at = (time_t)(ms / 1000);
	struct tm tm;

	if (ms < 0 || ms == INT64_MAX || !gmtime_r(&at, &tm) ||
	    !strftime(out, cap, "\"%Y-%m-%dT%H:%M:%SZ\"", &tm))
		snprintf(out, cap, "null");
}

/* The zone a period is stated in: tz_get's names are [A-Za-z0-9_+-./], nothing to
 * escape in JSON. */
static const char *wording_tz_name(const struct tz *tz)
{
	return tz ? tz_name(tz) : "UTC";
}

/* A window's figures, or null when there is no such limit; remaining < 0: unknown here
 * (quota_peek on several nodes). */
static int wording_window(char *buf, size_t cap, int64_t limit, int64_t remaining, int64_t reset_ms)
{
	if (limit < 0)
		return snprintf(buf, cap, "null");
	if (remaining < 0)
		return snprintf(buf, cap, "{\"limit\":%lld,\"remaining\":null,\"reset_ms\":null}",
		                (long long)limit);
	return snprintf(buf, cap, "{\"limit\":%lld,\"remaining\":%lld,\"reset_ms\":%lld}",
	                (long long)limit, (long long)remaining, (long long)reset_ms);
}

/* One level's figures as members of an object (no braces); its length, or -1. */
static int wording_usage_level(const struct wording_usage_level *l, char *buf, size_t cap)
{
	char since[40], until[40], asof[40], budget[32], left[32], rpm[96], tpm[96], conc[64];
	char model[6 * ACCT_NAME_MAX];
	size_t len, i;
	int n;

	wording_time(since, sizeof(since), l->period == QUOTA_PERIOD_TOTAL ? -1 : l->since_ms);
	wording_time(until, sizeof(until), l->until_ms);
	wording_time(asof, sizeof(asof), l->as_of_ms);
	if (l->cfg.budget_micros > 0) {
		snprintf(budget, sizeof(budget), "%lld", (long long)l->cfg.budget_micros);
		snprintf(left, sizeof(left), "%lld", (long long)(l->spent_micros < l->cfg.budget_micros
		                                                 ? l->cfg.budget_micros - l->spent_micros : 0));
	} else {
		snprintf(budget, sizeof(budget), "null");
		snprintf(left, sizeof(left), "null");
	}
	wording_window(rpm, sizeof(rpm), l->st.limit_requests, l->st.remaining_requests,
	               l->st.reset_requests_ms);
	wording_window(tpm, sizeof(tpm), l->st.limit_tokens, l->st.remaining_tokens,
	               l->st.reset_tokens_ms);
	if (l->cfg.max_concurrent > 0)
		snprintf(conc, sizeof(conc), "{\"limit\":%lld,\"in_flight\":%lld}",
		         (long long)l->cfg.max_concurrent, (long long)l->in_flight);
	else
		snprintf(conc, sizeof(conc), "null");
	n = snprintf(buf, cap, "\"period\":{\"kind\":\"%s\",\"time_zone\":\"%s\",\"start\":%s,"
	             "\"end\":%s},\"spent_micros\":%lld,\"spent_as_of\":%s,\"budget_micros\":%s,"
	             "\"budget_left_micros\":%s,\"requests_per_minute\":%s,"
	             "\"tokens_per_minute\":%s,\"concurrency\":%s,\"model_budgets\":[",
	             quota_period_name(l->period), wording_tz_name(l->cfg.tz), since, until,
	             (long long)l->spent_micros, asof,
	             budget, left, rpm, tpm, conc);
	if (n < 0 || (size_t)n >= cap)
		return -1;
	len = (size_t)n;
	for (i = 0; i < l->nmodels; i++) {
		const struct wording_usage_model *m = &l->models[i];
		int64_t b = m->b->quota.budget_micros;

		wording_json_escape(model, sizeof(model), m->b->model);
		wording_time(since, sizeof(since), m->b->quota.period == QUOTA_PERIOD_TOTAL ? -1
		                                                                            : m->since_ms);
		wording_time(until, sizeof(until), m->until_ms);
		wording_time(asof, sizeof(asof), m->as_of_ms);
		n = snprintf(buf + len, cap - len, "%s{\"model\":\"%s\",\"period\":{\"kind\":\"%s\","
		             "\"time_zone\":\"%s\",\"start\":%s,\"end\":%s},\"spent_micros\":%lld,"
		             "\"spent_as_of\":%s,\"budget_micros\":%lld,\"budget_left_micros\":%lld}",
		             i ? "," : "", model, quota_period_name(m->b->quota.period),
		             wording_tz_name(m->b->quota.tz), since, until,
		             (long long)m->spent_micros, asof, (long long)b,
		             (long long)(m->spent_micros < b ? b - m->spent_micros : 0));
		if (n < 0 || (size_t)n >= cap - len)
			return -1;
		len += (size_t)n;
	}
	n = snprintf(buf + len, cap - len, "]");
	return n < 0 || (size_t)n >= cap - len ? -1 : (int)(len + (size_t)n);
}

int wording_usage_json(const struct decision *d, const struct wording_usage *u, char *buf,
                       size_t cap)
{
	char name[1408], prefix[1408], team[1408];
	size_t len;
	int n;

	wording_json_escape(name, sizeof(name), d->key->name);
	wording_json_escape(prefix, sizeof(prefix), d->key->prefix);
	n = snprintf(buf, cap, "{\"object\":\"usage\",\"key\":{\"prefix\":\"%s\",\"name\":\"%s\",",
	             prefix, name);
	if (n < 0 || (size_t)n >= cap)
		return -1;
	len = (size_t)n;
	if ((n = wording_usage_level(&u->key, buf + len, cap - len)) < 0)
		return -1;
	len += (size_t)n;
	if (!d->key->team) {
		n = snprintf(buf + len, cap - len, "},\"team\":null}");
	} else {
		wording_json_escape(team, sizeof(team), d->key->team->name);
		n = snprintf(buf + len, cap - len, "},\"team\":{\"name\":\"%s\",\"shown\":%s%s",
		             team, u->team_shown ? "true" : "false", u->team_shown ? "," : "}}");
		if (n >= 0 && (size_t)n < cap - len && u->team_shown) {
			len += (size_t)n;
			if ((n = wording_usage_level(&u->team, buf + len, cap - len)) < 0)
				return -1;
			len += (size_t)n;
			n = snprintf(buf + len, cap - len, "}}");
		}
	}
	return n < 0 || (size_t)n >= cap - len ? -1 : (int)(len + (size_t)n);
}

/* An end user's id percent-encoded for a query (3 * ACCT_END_USER_MAX bytes hold any):
 * RFC 3986's unreserved characters as they are, every other byte %XX. */
static void wording_percent(char *out, size_t cap, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (; *s && o + 4 < cap; s++) {
		unsigned char c = (unsigned char)*s;

		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		    c == '-' || c == '.' || c == '_' || c == '~') {
			out[o++] = (char)c;
		} else {
			out[o++] = '%';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 15];
		}
	}
	out[o] = '\0';
}

/* Room kept for a page's end: has_more and the next page's path (an id of 256 bytes
 * percent-encoded is 768). */
#define WORDING_PAGE_END 1024

int wording_end_users_json(const struct decision *d, const struct wording_usage_level *l,
                           const struct usageview_end_user *eu, int n, const char *resume,
                           char *buf, size_t cap)
{
	char name[1408], prefix[1408], since[40], until[40], asof[40];
	char id[3 * ACCT_END_USER_MAX], next[3 * ACCT_END_USER_MAX];
	size_t len;
	int i, k;

	wording_json_escape(name, sizeof(name), d->key->name);
	wording_json_escape(prefix, sizeof(prefix), d->key->prefix);
	wording_time(since, sizeof(since), l->period == QUOTA_PERIOD_TOTAL ? -1 : l->since_ms);
	wording_time(until, sizeof(until), l->until_ms);
	wording_time(asof, sizeof(asof), l->as_of_ms);
	k = snprintf(buf, cap, "{\"object\":\"list\",\"key\":{\"prefix\":\"%s\",\"name\":\"%s\"},"
	             "\"period\":{\"kind\":\"%s\",\"time_zone\":\"%s\",\"start\":%s,\"end\":%s},"
	             "\"as_of\":%s,\"data\":[", prefix, name, quota_period_name(l->period),
	             wording_tz_name(l->cfg.tz), since, until, asof);
	if (k < 0 || (size_t)k + WORDING_PAGE_END >= cap)
		return -1;
	len = (size_t)k;
	for (i = 0; i < n; i++) {
		wording_json_id(id, sizeof(id), eu[i].id);
		k = snprintf(buf + len, cap - len - WORDING_PAGE_END,
		             "%s{\"end_user\":\"%s\",\"requests\":%lld,\"spent_micros\":%lld}",
		             i ? "," : "", id, (long long)eu[i].requests, (long long)eu[i].spent);
		if (k < 0 || (size_t)k >= cap - len - WORDING_PAGE_END)
			break;
		len += (size_t)k;
	}
	if (i == 0 && n > 0)
		return -1;
	if (i < n || resume) {
		wording_percent(next, sizeof(next), i < n || !*resume ? (i ? eu[i - 1].id : d->page_after)
		                                                      : resume);
		k = snprintf(buf + len, cap - len, "],\"has_more\":true,\"next\":"
		             "\"/tally/v1/usage/end_users?limit=%d&after=%s\"}", d->page_limit, next);
	} else {
		k = snprintf(buf + len, cap - len, "],\"has_more\":false,\"next\":null}");
	}
	return k < 0 || (size_t)k >= cap - len ? -1 : (int)(len + (size_t)k);
}
