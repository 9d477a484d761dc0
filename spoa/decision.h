/* decision: the agent's verdict on one request (who calls, which model, may they, which
 * backend). Pure over its inputs; runs on the I/O threads for every NOTIFY. */
#ifndef TALLY_DECISION_H
#define TALLY_DECISION_H

#include <stddef.h>

#include "acct-t.h"
#include "keytable-t.h"
#include "owner.h"
#include "quota.h"
#include "reqbody.h"
#include "spop-t.h"

enum decision_verdict {
	DECISION_ALLOW = 0,
	DECISION_NO_KEY,            /* 401: neither Authorization: Bearer nor x-api-key */
	DECISION_UNKNOWN_KEY,       /* 401 */
	DECISION_REVOKED_KEY,       /* 401 */
	DECISION_BAD_ENDPOINT,      /* 404: not one of the inference endpoints the gateway serves */
	DECISION_BAD_BODY,          /* 400: not a JSON object, or model/stream malformed */
	DECISION_MODEL_REQUIRED,    /* 400: no model in the body and no default on the key */
	DECISION_UNKNOWN_MODEL,     /* 404 */
	DECISION_MODEL_FORBIDDEN,   /* 403: not on the key's allow-list */
	DECISION_BODY_TOO_LARGE,    /* 413: restricted key, body beyond the inspection buffer */
	DECISION_WRONG_API,         /* 400: the model's provider speaks the other API */
	DECISION_NO_ROUTE,          /* 502: the model's provider is not configured */
	DECISION_AGENT_ERROR,       /* 500: HAProxy's message could not be read */
	DECISION_RPM_LIMITED,       /* 429: the key's requests per minute */
	DECISION_TPM_LIMITED,       /* 429: the key's tokens per minute */
	DECISION_CONCURRENCY_LIMITED, /* 429: the key's requests in flight */
	DECISION_BUDGET_EXCEEDED,   /* 402: the key's spend budget for the period */
	DECISION_UNAUTHENTICATED,   /* 500: the request did not carry the gateway secret */
	DECISION_BUSY,              /* 503: too many requests in flight to account for */
	DECISION_MODELS_LISTED,     /* 200: GET /v1/models[/ID], answered by the gateway */
	DECISION_STORED_STATE,      /* 400: a Responses body builds on state stored upstream */
	DECISION_UNKNOWN_RESPONSE,  /* 404: a stored response this key did not make */
	DECISION_COST_POLICY,       /* 400: a service tier, server tool, audio or cache write
	                             * the key may not ask for, or that the gateway cannot
	                             * price */
	/* The same refusals at the level of the key's team (docs/limits.md, "Teams"). */
	DECISION_TEAM_MODEL_FORBIDDEN,      /* 403: not on the team's allow-list */
	DECISION_TEAM_RPM_LIMITED,          /* 429 */
	DECISION_TEAM_TPM_LIMITED,          /* 429 */
	DECISION_TEAM_CONCURRENCY_LIMITED,  /* 429 */
	DECISION_TEAM_BUDGET_EXCEEDED,      /* 402 */
	/* GET /tally/v1/usage: the key's own usage, answered by the gateway (docs/limits.md,
	 * "A key's own usage"); or 503 when its spend cannot be read now (usageview.h). */
	DECISION_USAGE_REPORTED,            /* 200 */
	DECISION_USAGE_UNAVAILABLE,         /* 503 */
	/* The end user a request names against its key's policy (docs/limits.md, "End
	 * users"). */
	DECISION_END_USER_REQUIRED,         /* 400: none named, and the key needs one */
	DECISION_END_USER_FORBIDDEN,        /* 400: one named, and the key may not */
	DECISION_BAD_END_USER,              /* 400: named twice, or not an id (acct.h) */
	DECISION_BAD_QUERY,                 /* 400: a page of GET /tally/v1/usage/end_users
	                                     * asked for out of bounds */
	/* A request's tags (docs/limits.md, "Tags"). */
	DECISION_BAD_TAGS,                  /* 400: X-Tally-Tags twice, or not tags (tags.h) */
	DECISION_TAG_CONFLICT,              /* 400: a tag the key or its team fixes, to
	                                     * another value */
	DECISION_TAG_BUDGET_EXCEEDED,       /* 402: a tag's budget for the period */
	DECISION_TAG_NOT_ALLOWED,           /* 403: a tag with a budget that neither the key
	                                     * nor its team fixes */
	/* The limits of the end user a request names (docs/limits.md, "End users"). */
	DECISION_END_USER_RPM_LIMITED,      /* 429 */
	DECISION_END_USER_TPM_LIMITED,      /* 429 */
	DECISION_END_USER_BUDGET_EXCEEDED,  /* 402 */
	/* A key's or its team's budget for the request's model (docs/limits.md, "Budgets per
	 * model"). */
	DECISION_MODEL_BUDGET_EXCEEDED,     /* 402 */
	DECISION_TEAM_MODEL_BUDGET_EXCEEDED, /* 402 */
	/* Several nodes: a budget at any level whose share this node could not top up in
	 * time, the cluster's pool not found spent (docs/limits.md, "Shared limits"). */
	DECISION_BUDGET_PENDING,            /* 429 */
	DECISION_VERDICT_COUNT
};

/* The stored response id a decision stopped at, for its caller to ask the owners' store
 * (owner.h) about: a stored response's path, or a body's previous_response_id. */
enum decision_owner_of { DECISION_OWNER_NONE, DECISION_OWNER_PATH, DECISION_OWNER_PREVIOUS };

/* What the owners' store says of that id: the caller asks it (decision.c reads no
 * store); pending is read first (owner.h). */
struct decision_owner {
	int known;                  /* e is filled */
	struct owner_entry e;
	int pending;                /* the key may have creates whose row has not come */
};

/* GET /tally/v1/usage/end_users's pages (decision_own_path): limit=N, 1 to
 * DECISION_PAGE_MAX (default DECISION_PAGE_DEFAULT), and after=ID, percent-encoded, the
 * last id of the page before. A query longer than DECISION_QUERY_MAX is refused. */
#define DECISION_PAGE_DEFAULT 50
#define DECISION_PAGE_MAX 100
#define DECISION_QUERY_MAX 1024

enum decision_model_source {
	DECISION_MODEL_NONE,
	DECISION_MODEL_BODY,        /* named in the (possibly truncated) body */
	DECISION_MODEL_KEY_DEFAULT, /* body named none, or was cut before naming one */
};

/* What a request may ask for that costs more, for keys whose own columns are NULL (the
 * agent's --service-tiers, --server-tools, --audio, --cache-writes; docs/pricing.md). */
struct decision_policy {
	const char *service_tiers;  /* comma-separated; NULL or "": every tier priced */
	enum kt_policy server_tools; /* KT_POLICY_INHERIT reads as KT_POLICY_PRICED */
	enum kt_policy audio;
	enum kt_policy cache_writes; /* prompt cache writes asked for (cache_control) */
	int64_t max_body;            /* request body bytes a request may have; 0: no cap */
};

/* What a DECISION_COST_POLICY refused. */
enum decision_costly { DECISION_COSTLY_TIER = 1, DECISION_COSTLY_TOOLS, DECISION_COSTLY_AUDIO,
                       DECISION_COSTLY_CACHE };

/* What HAProxy sent for one request. Views borrow the NOTIFY frame's buffer and live
 * until the ACK is built. Absent headers have len 0. */
struct decision_request {
	struct spop_str authorization;
	struct spop_str api_key;
	struct spop_str method;
	struct spop_str path;
	struct spop_str body;
	struct spop_str secret;     /* the gateway secret HAProxy sent (gwsecret.h) */
	struct spop_str anthropic_version;  /* the anthropic-version header */
	struct spop_str end_user;   /* the X-Tally-User header (the last one), cut at
	                             * ACCT_END_USER_MAX bytes by the SPOE file */
	int64_t end_user_headers;   /* how many X-Tally-User headers came */
	struct spop_str tags;       /* the X-Tally-Tags header (the last one), cut one byte
	                             * past TAGS_HEADER_MAX by the SPOE file */
	int64_t tags_headers;       /* how many X-Tally-Tags headers came */
	struct spop_str query;      /* the query string, cut one byte past DECISION_QUERY_MAX */
	int body_length_known;      /* Content-Length was sent (not chunked, not HTTP/2 without) */
	int body_truncated;         /* HAProxy buffered less than the advertised length */
	int64_t body_size;          /* the whole body's size as HAProxy knows it; -1 unknown */
	int64_t json_max;           /* bytes HAProxy's json_query reads an answer in; 0 the
	                             * regular buffer (set by tally.cfg, never a client) */
	const struct decision_policy *policy; /* NULL: every default */
};

struct decision {
	enum decision_verdict verdict;
	const struct kt_key *key;           /* borrowed from the keytable; NULL if unknown */
	const struct kt_model *model;       /* borrowed from the keytable */
	enum decision_model_source model_source;
	int stream;                         /* 1, 0, or -1 when the body was cut first */
	int body_truncated;                 /* HAProxy's cut, or a JSON prefix */
	int64_t over_cap;                   /* DECISION_BODY_TOO_LARGE for a body above the
	                                     * policy's max_body: that cap; else 0 */
	long max_output;                    /* the answer's bound as the endpoint reads it
	                                     * (max_tokens, or max_output_tokens); -1 none */
	int unbilled;                       /* a count of tokens (count_tokens): no usage to
	                                     * bill, nothing estimated; limits count the request */
	int creates_response;               /* POST /v1/responses: its answer's id is the
	                                     * key's (owner.h) */
	/* A stored response's path (GET or DELETE /v1/responses/ID, its cancel and
	 * input_items): the ID as sent, cut to fit, for the message of a refusal; and
	 * wait, set with DECISION_UNKNOWN_RESPONSE when the key has creates whose rows have
	 * not come: HAProxy asks again a little later (tally.cfg), as the ID may be one
	 * of theirs. */
	char response_id[ACCT_RESPONSE_ID_MAX];
	int wait;
	/* Set when the decision needs to know who made that id (decision_owner_id): until
	 * decision_owned_by answers, the verdict is DECISION_UNKNOWN_RESPONSE. */
	enum decision_owner_of owner_query;
	enum decision_costly costly;        /* with DECISION_COST_POLICY: what was refused */
	int capture;                        /* the response needs the Lua capture: a stream,
	                                     * possibly one, or a body too big for the buffer */
	int count_searches;                 /* the capture counts OpenAI's web searches */
	/* The usage amendment of an OpenAI stream that did not ask for usage: the capture
	 * filter turns amend_cut bytes at amend_at into amend_text (a static string), so
	 * that stream_options.include_usage is true, and removes the usage event from the
	 * answer again. amend_scan: the body was cut, the filter reads the rest and puts
	 * amend_text (or as many spaces) before the body's closing brace. */
	/* allow_scan: a key restricted to some models sent a cut body whose "model" comes
	 * past the cut; routed by the key's default, and the capture filter spoils the body
	 * unless that model is one of decision_allow_list's. */
	int allow_scan;
	/* The key or its team has budgets per model: a cut body may name past the cut only
	 * the model it was routed to (decision_scan_list). */
	int scan_route_only;
	long amend_at;                      /* > 0 when the agent edits; 0 none */
	long amend_cut;
	const char *amend_text;             /* NULL: no amendment */
	int amend_scan;
	/* stateless_scan: a cut Responses body; the capture filter spoils it if a
	 * previous_response_id or conversation member comes past the cut. */
	int stateless_scan;
	/* A cut body's members past the cut that cost more (decision_costly_scan): 'o', 'w',
	 * 'a' for tools the provider runs, web searches, audio the request may not ask for;
	 * and the service tiers it may, a line each ("" any). */
	char costly_scan[4];
	char tiers_scan[128];
	struct reqbody_info body;
	/* The end user the request named, the header's or the body's (decision_end_user);
	 * "" none. end_user_header: the header was sent; end_user_api: the API whose body
	 * member was read (what a refusal's message names). */
	char end_user[ACCT_END_USER_MAX];
	int end_user_header;
	enum kt_api end_user_api;
	/* The request's tags and its key's fixed ones, in canonical text (decision_tags);
	 * "" none. tags_status: why they were refused. */
	char tags[TAGS_TEXT_MAX];
	enum tags_status tags_status;
	/* Those of its tags that have a budget, in tag order, and which one refused (or
	 * was not the key's to carry). */
	const struct kt_tag_budget *tag_budgets[TAGS_MAX];
	size_t ntag_budgets;
	const struct kt_tag_budget *refusing_tag;
	/* The limits of its end user (keytable_end_user_limits), when it was admitted or
	 * refused under some; else NULL. Set whenever the verdict is an end user's. */
	const struct quota_cfg *end_user_quota;
	/* The key's and its team's budgets for its model (keytable_model_budget), when it
	 * was admitted or refused under them; else NULL. */
	const struct kt_model_budget *key_model_budget, *team_model_budget;
	/* DECISION_USAGE_REPORTED of GET /tally/v1/usage/end_users: the page asked for. */
	int end_users_page;
	int page_limit;
	char page_after[ACCT_END_USER_MAX];     /* "" from the first */
	struct quota_hold holds[ACCT_HOLDS];  /* what an admitted request holds of each
	                                       * level's limits (acct-t.h) */
	struct quota_status quota;         /* where the key stands (keys with limits; a key
	                                    * without, its team), or the refusing team */
	int has_quota;                      /* the key has a limit: quota is filled */
	/* The card a reservation is priced by (decision_estimate): the model's for the tier
	 * asked for and the prompt's size, or for a model the gateway has not seen
	 * (allow_scan) the dearest it could be; no card: every price PRICE_UNSET. */
	struct price_card est_card;
	/* The tokens the response named by previous_response_id reported (owner.h): the
	 * context the provider reads, and bills, again; 0 for none. */
	int64_t previous_tokens;
	/* decision_estimate's, for an allowed request: what it may use, prompt and completion,
	 * their sum and its cost (what a limited key reserves). */
	int64_t est_prompt_tokens, est_completion_tokens, est_tokens, est_cost_micros;
};

/* Decides for req against the snapshot t. Always fills d; never fails. A request that
 * names a stored response stops there (d->owner_query): the caller asks the owners'
 * store about decision_owner_id and finishes d with decision_owned_by, or leaves it
 * refused when it keeps no store. */
void decision_make(const struct keytable *t, const struct decision_request *req,
                   struct decision *d);

/* The id d->owner_query names: a view into req or into d (valid while both are). */
struct spop_str decision_owner_id(const struct decision *d, const struct decision_request *req);

/* Finishes d (made by decision_make for req and t, with d->owner_query set) with o, what
 * the owners' store says of its id. */
void decision_owned_by(const struct keytable *t, const struct decision_request *req,
                       const struct decision_owner *o, struct decision *d);

/* The bytes of decision_allow_list a request may carry to HAProxy, NUL included. */
#define DECISION_ALLOW_LIST_MAX 1024

/* The models key k may use that provider p serves, one name a line, into buf (cap
 * bytes, NUL-terminated when it fits); names a line or a JSON string could not carry
 * as they are are left out, so that they are refused. Returns the length it needs,
 * without the NUL. */
size_t decision_allow_list(const struct kt_key *k, const struct kt_provider *p, char *buf,
                           size_t cap);

/* What the capture filter lets an allow_scan request name past the cut, as
 * decision_allow_list writes it: d's route alone when d->scan_route_only, else the
 * models its key may use that the route's provider serves. */
size_t decision_scan_list(const struct decision *d, char *buf, size_t cap);

/* The id of the key of t req names if it is not revoked, else 0: what lets a long
 * body's pieces take room before its decision, in that key's share (longbody.h). */
int64_t decision_key_active(const struct keytable *t, const struct decision_request *req);

/* What an allowed request may use, into d->est_*: for the prompt, the body's bytes / 4
 * plus the previous response's tokens (previous_tokens); for the completion, its
 * output bound (max_output), else the model's largest answer (kt_model.max_output),
 * else default_max_tokens; and their cost at d->est_card (an input or output price not
 * set at the card's dearest token rate, price.h; no card: 0). A limited key reserves
 * it; a row whose usage goes unreported is charged it. */
void decision_estimate(struct decision *d, const struct decision_request *req,
                       int64_t default_max_tokens);

/* Turns an allowed d into the denial of the limit v that refused it at level: its key's,
 * its team's, its end user's (who have no concurrency limit) or a tag's budget (a
 * tag's only limit). */
void decision_limit(struct decision *d, enum quota_verdict v, enum quota_level level);

int decision_http_status(enum decision_verdict v);

/* Stable snake_case name of a verdict ("allow", "unknown_key", ...), for logs and rows. */
const char *decision_verdict_name(enum decision_verdict v);

/* The API a model list (or its error) is for: Anthropic's when the request looks like an
 * Anthropic client's (anthropic-version, or its key in x-api-key), else OpenAI's. */
enum kt_api decision_models_api(const struct decision_request *req);

#endif
