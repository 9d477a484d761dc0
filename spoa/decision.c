/* decision: turns what HAProxy sent about a request into a verdict (I/O threads, pure).
 *
 * Order of checks: key first (an unauthenticated caller learns nothing about models),
 * then the body, then the model and the key's allow-list, then the route. */
#include "decision.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "keytable.h"

struct verdict_info {
	const char *name;       /* verdict name, also the error "code" */
	int status;
	const char *openai_type;
	const char *anthropic_type;
};

static const struct verdict_info verdicts[DECISION_VERDICT_COUNT] = {
	[DECISION_ALLOW] = { "allow", 0, "", "" },
	[DECISION_NO_KEY] = { "missing_api_key", 401, "invalid_request_error", "authentication_error" },
	[DECISION_UNKNOWN_KEY] = { "invalid_api_key", 401, "invalid_request_error", "authentication_error" },
	[DECISION_REVOKED_KEY] = { "revoked_api_key", 401, "invalid_request_error", "authentication_error" },
	[DECISION_BAD_BODY] = { "invalid_body", 400, "invalid_request_error", "invalid_request_error" },
	[DECISION_MODEL_REQUIRED] = { "model_required", 400, "invalid_request_error", "invalid_request_error" },
	[DECISION_UNKNOWN_MODEL] = { "model_not_found", 404, "invalid_request_error", "not_found_error" },
	[DECISION_MODEL_FORBIDDEN] = { "model_not_allowed", 403, "permission_error", "permission_error" },
	[DECISION_BODY_TOO_LARGE] = { "body_too_large", 413, "invalid_request_error", "request_too_large" },
	[DECISION_NO_ROUTE] = { "no_route", 502, "server_error", "api_error" },
};

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

/* Checks the body and picks the model; returns the verdict so far. */
static enum decision_verdict decision_pick_model(const struct keytable *t,
                                                 const struct decision_request *req,
                                                 struct decision *d)
{
	enum reqbody_status st = reqbody_inspect(req->body.ptr, req->body.len, &d->body);

	if (st == REQBODY_INVALID)
		return DECISION_BAD_BODY;
	d->body_truncated = req->body_truncated || st == REQBODY_PREFIX;
	d->stream = st == REQBODY_PREFIX ? d->body.stream : d->body.stream == 1;
	/* What follows the cut may name another model, and upstreams take the last one:
	 * an allow-list can only judge a body it has seen whole. */
	if (d->body_truncated && d->key->restricted)
		return DECISION_BODY_TOO_LARGE;
	if (d->body.has_model) {
		d->model_source = DECISION_MODEL_BODY;
		d->model = d->body.model_too_long
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

static enum decision_verdict decision_judge(const struct keytable *t,
                                            const struct decision_request *req,
                                            struct decision *d)
{
	struct spop_str key = decision_find_key(req);
	enum decision_verdict v;

	if (!key.len)
		return DECISION_NO_KEY;
	d->key = keytable_find_key(t, key.ptr, key.len);
	if (!d->key)
		return DECISION_UNKNOWN_KEY;
	if (d->key->revoked)
		return DECISION_REVOKED_KEY;
	v = decision_pick_model(t, req, d);
	if (v != DECISION_ALLOW)
		return v;
	if (!keytable_key_allows(d->key, d->model))
		return DECISION_MODEL_FORBIDDEN;
	if (!d->model->provider)
		return DECISION_NO_ROUTE;
	return DECISION_ALLOW;
}

void decision_make(const struct keytable *t, const struct decision_request *req,
                   struct decision *d)
{
	memset(d, 0, sizeof(*d));
	d->stream = -1;
	d->verdict = decision_judge(t, req, d);
}

/* Appends s as JSON string content (without quotes), truncating at 200 bytes: error
 * messages quote client input and must stay small. */
static void decision_json_escape(char *out, size_t cap, const char *s)
{
	size_t o = 0, i;

	for (i = 0; s[i] && i < 200 && o + 7 < cap; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\') {
			out[o++] = '\\';
			out[o++] = (char)c;
		} else if (c < 0x20 || c == 0x7f) {
			o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
		} else {
			out[o++] = (char)c;
		}
	}
	out[o] = '\0';
}

static void decision_message(const struct decision *d, char *msg, size_t cap)
{
	char model[2 * 6 * 40];

	decision_json_escape(model, sizeof(model), d->body.has_model ? d->body.model : "");
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
		snprintf(msg, cap, "Key %s is restricted to some models and the request body is larger than the gateway inspects; send a smaller body or ask the operator to raise tune.bufsize.", d->key->prefix);
		break;
	case DECISION_NO_ROUTE:
		snprintf(msg, cap, "The model '%s' has no provider configured.", model);
		break;
	default:
		snprintf(msg, cap, "Request allowed.");
		break;
	}
}

int decision_error_json(const struct decision *d, const struct decision_request *req,
                        char *buf, size_t cap)
{
	static const char messages_path[] = "/v1/messages";
	const struct verdict_info *vi = &verdicts[(unsigned)d->verdict < DECISION_VERDICT_COUNT ? d->verdict : DECISION_NO_ROUTE];
	char msg[1024];
	int n;

	decision_message(d, msg, sizeof(msg));
	if (req->path.len >= sizeof(messages_path) - 1 &&
	    memcmp(req->path.ptr, messages_path, sizeof(messages_path) - 1) == 0)
		n = snprintf(buf, cap, "{\"type\":\"error\",\"error\":{\"type\":\"%s\",\"message\":\"%s\"}}",
		             vi->anthropic_type, msg);
	else
		n = snprintf(buf, cap, "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":\"%s\"}}",
		             msg, vi->openai_type, vi->name);
	return n < 0 || (size_t)n >= cap ? -1 : n;
}
