/* Types of the accounting path: one row per HTTP transaction, built on the intake
 * thread from HAProxy's end-of-transaction record (or, when none came, from what the
 * agent decided), queued, and stored by the writer thread. Plain data: rows are copied
 * by value through the queue and the journal, so they hold no pointers. */
#ifndef TALLY_ACCT_T_H
#define TALLY_ACCT_T_H

#include <stdint.h>

#include "enduser.h"
#include "quota.h"
#include "tags.h"
#include "tier.h"

#define ACCT_ID_MAX    64   /* request ids: HAProxy's uuid() is 36 characters */
#define ACCT_NAME_MAX  128  /* model names, as configured or as the upstream names them */
#define ACCT_SHORT_MAX 48   /* provider, verdict, backend names */
#define ACCT_RESPONSE_ID_MAX 96  /* a stored response's id (OpenAI's: 53 characters) */
#define ACCT_TIER_MAX  TIER_NAME_MAX   /* a service tier's name (tier.h) */
/* Where a request's holds sit in its holds[], one per level it was admitted at: its
 * key's limits, its team's, its end user's, its key's and its team's budgets for its
 * model, then its tags' budgets (in tag order). */
enum { ACCT_HOLD_KEY, ACCT_HOLD_TEAM, ACCT_HOLD_END_USER, ACCT_HOLD_KEY_MODEL,
       ACCT_HOLD_TEAM_MODEL, ACCT_HOLD_TAGS, ACCT_HOLDS = ACCT_HOLD_TAGS + TAGS_MAX };

#define ACCT_END_USER_MAX ENDUSER_ID_MAX  /* an end user's id (enduser.h) */

/* Integer fields the upstream (or HAProxy) did not report: stored as SQL NULL. */
#define ACCT_NONE (-1)

/* How the transaction ended; stored by name (acct_outcome_name). */
enum acct_outcome {
	ACCT_COMPLETE = 0,        /* upstream answered 2xx and the response went out whole,
	                           * or the client left after its stream's terminal event */
	ACCT_CLIENT_ABORT,        /* the client went away before the response ended */
	ACCT_UPSTREAM_ERROR,      /* upstream 5xx, refused, timed out or closed mid-response */
	ACCT_UPSTREAM_REJECTED,   /* upstream 4xx (its own validation, rate limit, ...) */
	ACCT_DENIED,              /* a denial: the agent's (never forwarded), or the capture
	                           * filter's past the cut (forwarded unreadable) */
	ACCT_GATEWAY_REJECTED,    /* HAProxy answered without a verdict (agent unavailable
	                           * under fail-closed, malformed request, no route) */
	ACCT_NO_RECORD,           /* decided, but HAProxy's record never arrived in time */
	ACCT_OUTCOME_COUNT
};

/* Where the token counts came from; stored by name (acct_usage_source_name). */
enum acct_usage_source {
	ACCT_USAGE_NONE = 0,      /* no usage seen (denied, error body, cut before usage) */
	ACCT_USAGE_RESPONSE,      /* the usage object of a unary JSON response */
	ACCT_USAGE_STREAM,        /* the usage events of a server-sent event stream */
	ACCT_USAGE_PARTIAL,       /* some counts only: the stream ended before its usage */
	ACCT_USAGE_SOURCE_COUNT
};

/* acct_row.flags */
#define ACCT_FLAG_UNBILLED 1         /* nothing in the answer is billed (counts, reads of
                                      * stored responses) */
#define ACCT_FLAG_CREATES_RESPONSE 2 /* an admitted POST /v1/responses: the answer's id
                                      * is the key's */
#define ACCT_FLAG_WAITING 4          /* a refusal HAProxy asks about again (decision.h,
                                      * wait) */
#define ACCT_FLAG_SCANNED 8          /* an admitted cut body that the capture filter
                                      * reads past the cut and may refuse there */

struct acct_row {
	char request_id[ACCT_ID_MAX];      /* X-Request-Id; never empty */
	int64_t key_id;                    /* ACCT_NONE: no known key */
	char model[ACCT_NAME_MAX];         /* the routed model, or the dated snapshot of it the
	                                    * answer named (join.h); "" none */
	char model_requested[ACCT_NAME_MAX]; /* the configured model the agent routed to */
	char provider[ACCT_SHORT_MAX];     /* provider name; "" none */
	char verdict[ACCT_SHORT_MAX];      /* agent verdict, "fail_open", or "" never decided */
	char termination[8];               /* HAProxy termination state, e.g. "--", "CD" */
	int status;                        /* HTTP status sent to the client; 0 none */
	int stream;                        /* 1, 0, or ACCT_NONE */
	int64_t prompt_tokens;             /* all input tokens, cached ones included */
	int64_t completion_tokens;         /* all output tokens, reasoning ones included */
	int64_t cached_tokens;             /* input read from the provider's cache */
	int64_t cache_creation_tokens;     /* input written to the cache (Anthropic) */
	int64_t reasoning_tokens;
	/* Classes priced apart (docs/pricing.md), each a part of the count named. */
	int64_t cache_creation_1h_tokens;  /* of cache_creation_tokens: written for an hour */
	int64_t audio_input_tokens;        /* of prompt_tokens */
	int64_t audio_output_tokens;       /* of completion_tokens */
	int64_t accepted_prediction_tokens; /* of completion_tokens */
	int64_t rejected_prediction_tokens; /* of completion_tokens */
	int64_t web_search_calls;          /* server-side web searches, billed per call */
	char service_tier[ACCT_TIER_MAX];  /* the tier the provider reports; "" none */
	int64_t cost_micros;               /* ACCT_NONE: unpriced, or no usage */
	int unpriced;                      /* usage known but the model has no prices */
	unsigned priced_fallback;          /* classes charged at a stated rate (price.h) */
	enum acct_outcome outcome;
	enum acct_usage_source usage_source;
	int64_t started_at_ms;             /* unix milliseconds when the request arrived */
	int64_t duration_ms;               /* request arrival to end of response */
	int64_t ttfb_ms;                   /* request arrival to the upstream's headers */
	int64_t bytes_in;                  /* request bytes from the client */
	int64_t bytes_out;                 /* response bytes to the client, headers included */
	/* A forwarded request whose usage went unreported in part or whole is charged an
	 * estimate of the missing part (acct_estimate): its tokens and their cost;
	 * ACCT_NONE: nothing estimated (or, for the cost, unpriced). */
	int64_t estimated_tokens;
	int64_t estimated_cost_micros;
	/* Bookkeeping, journaled but not stored: what the decision estimated the request
	 * would use (prompt: body bytes / 4; completion: its max_tokens, or the agent's
	 * default); ACCT_NONE: no decision saw it. */
	int64_t est_prompt_tokens;
	int64_t est_completion_tokens;
	/* Bookkeeping, not stored: the journal epochs holding this transaction's entries
	 * (decision, row), released once the row is committed or dropped; 0: none. */
	uint32_t journal_epoch[2];
	/* Journaled, not stored in requests: what the decision knew of the endpoint
	 * (ACCT_FLAG_*), and the id of the response a Responses create stored upstream
	 * ("" none), which the writer keeps in stored_responses with the row's key. */
	int flags;
	char response_id[ACCT_RESPONSE_ID_MAX];
	/* Stored: the model the answer named when it is neither the routed model nor a
	 * dated snapshot of it (join.h); "" none. */
	char model_reported[ACCT_NAME_MAX];
	/* Stored: the team of the key when the request was decided (teams.id); ACCT_NONE:
	 * none, or no decision saw it. */
	int64_t team_id;
	/* Stored: the end user the request named (docs/limits.md, "End users"); "" none. */
	char end_user[ACCT_END_USER_MAX];
	/* Stored: its tags, fixed ones included, in canonical text (tags.h); "" none. */
	char tags[TAGS_TEXT_MAX];
	/* Not stored either: what the request holds of each level's limits until its row
	 * is built (zero after a restart: the journal does not keep it). */
	struct quota_hold holds[ACCT_HOLDS];
};

#endif
