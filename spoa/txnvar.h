/* txnvar: the transaction variables HAProxy and the agent share (txn.tally.NAME), once:
 * who writes each and who reads it. The agent's ACK sets its variables by these names
 * (session.c; spoe-tally.conf's var-prefix "tally" puts them under txn.tally.);
 * scripts/contract.c prints the table and tests/test_contract.py compares it with every
 * variable haproxy/tally.cfg, the Lua files (haproxy/capture.lua, scanner.lua) and
 * haproxy/spoe-tally.conf write or read, so a variable added, dropped or renamed on one
 * side only fails there. The record's variables (record.h's table) must be here too.
 * Header only: no thread of its own. */
#ifndef TALLY_TXNVAR_H
#define TALLY_TXNVAR_H

/* Who writes or reads a variable. */
#define TXNVAR_AGENT    1   /* the agent's ACK */
#define TXNVAR_CFG      2   /* haproxy/tally.cfg: set-var, ACLs, log-format */
#define TXNVAR_LUA      4   /* haproxy/capture.lua, scanner.lua */
#define TXNVAR_SPOE     8   /* haproxy/spoe-tally.conf: set-on-error, set-process-time, args */
#define TXNVAR_OPERATOR 16  /* read by none of ours: offered to the operator's own rules
                             * and logs (docs/haproxy-integration.md lists them) */

/* X(ID, NAME, WRITERS, READERS, WHAT) */
#define TXNVAR_TABLE(X) \
	X(VERDICT,            "verdict",          TXNVAR_AGENT | TXNVAR_CFG | TXNVAR_LUA, TXNVAR_CFG, "allow, or why not (decision.h's names)") \
	X(STATUS,             "status",           TXNVAR_AGENT | TXNVAR_LUA, TXNVAR_CFG, "the refusal's HTTP status; 0 for allow") \
	X(BODY,               "body",             TXNVAR_AGENT | TXNVAR_LUA, TXNVAR_CFG, "the refusal's JSON body") \
	X(KEY_ID,             "key_id",           TXNVAR_AGENT, TXNVAR_CFG, "the key's id (record)") \
	X(KEY_NAME,           "key",              TXNVAR_AGENT, TXNVAR_OPERATOR, "the key's name") \
	X(MODEL,              "model",            TXNVAR_AGENT, TXNVAR_CFG, "the model the request named (record)") \
	X(MODEL_SOURCE,       "model_source",     TXNVAR_AGENT, TXNVAR_OPERATOR, "key_default when the body named none") \
	X(PROVIDER,           "provider",         TXNVAR_AGENT, TXNVAR_CFG, "the model's provider (record)") \
	X(BACKEND,            "backend",          TXNVAR_AGENT, TXNVAR_CFG, "the provider's HAProxy backend") \
	X(STREAM,             "stream",           TXNVAR_AGENT, TXNVAR_CFG, "1 when the request asked to stream (record)") \
	X(BODY_TRUNCATED,     "truncated",        TXNVAR_AGENT, TXNVAR_OPERATOR, "1 when the agent judged a cut body") \
	X(CAPTURE,            "capture",          TXNVAR_AGENT, TXNVAR_CFG, "1: the answer goes through the capture filter") \
	X(UNBILLED,           "unbilled",         TXNVAR_AGENT, TXNVAR_CFG, "1: nothing in the answer is billed") \
	X(STORED_WAIT,        "wait",             TXNVAR_AGENT | TXNVAR_LUA, TXNVAR_CFG, "stored response: 1 ask again later, 2 stop asking") \
	X(PRICE_INPUT,        "p_in",             TXNVAR_AGENT, TXNVAR_CFG, "micro-dollars per Mtok, for the cost header") \
	X(PRICE_OUTPUT,       "p_out",            TXNVAR_AGENT, TXNVAR_CFG, "micro-dollars per Mtok, for the cost header") \
	X(PRICE_CACHED,       "p_cached",         TXNVAR_AGENT, TXNVAR_CFG, "micro-dollars per Mtok, for the cost header") \
	X(PRICE_CACHE_WRITE,  "p_cw",             TXNVAR_AGENT, TXNVAR_CFG, "micro-dollars per Mtok, for the cost header") \
	X(LIMIT_REQUESTS,     "rl_limit_req",     TXNVAR_AGENT, TXNVAR_CFG, "x-ratelimit-limit-requests") \
	X(REMAINING_REQUESTS, "rl_remaining_req", TXNVAR_AGENT, TXNVAR_CFG, "x-ratelimit-remaining-requests") \
	X(RESET_REQUESTS_MS,  "rl_reset_req_ms",  TXNVAR_AGENT, TXNVAR_CFG, "x-ratelimit-reset-requests") \
	X(LIMIT_TOKENS,       "rl_limit_tok",     TXNVAR_AGENT, TXNVAR_CFG, "x-ratelimit-limit-tokens") \
	X(REMAINING_TOKENS,   "rl_remaining_tok", TXNVAR_AGENT, TXNVAR_CFG, "x-ratelimit-remaining-tokens") \
	X(RESET_TOKENS_MS,    "rl_reset_tok_ms",  TXNVAR_AGENT, TXNVAR_CFG, "x-ratelimit-reset-tokens") \
	X(RETRY_AFTER,        "retry_after",      TXNVAR_AGENT, TXNVAR_CFG, "Retry-After of a limit's refusal") \
	X(SCAN_ALLOW,         "allow",            TXNVAR_AGENT, TXNVAR_LUA, "the models a cut body may name") \
	X(SCAN_COSTLY,        "costly",           TXNVAR_AGENT, TXNVAR_LUA, "the costly tools a cut body may not name") \
	X(SCAN_TIERS,         "tiers",            TXNVAR_AGENT, TXNVAR_LUA, "the service tiers a cut body may name") \
	X(SCAN_STATELESS,     "nostate",          TXNVAR_AGENT, TXNVAR_LUA, "1: a cut body may not name stored state") \
	X(SCAN_AMEND,         "amend_scan",       TXNVAR_AGENT, TXNVAR_LUA, "1: the filter finds where to amend") \
	X(COUNT_SEARCHES,     "count_searches",   TXNVAR_AGENT, TXNVAR_LUA, "1: the capture counts web searches") \
	X(AMEND_TEXT,         "amend_text",       TXNVAR_AGENT, TXNVAR_LUA, "what the filter inserts in the body") \
	X(AMEND_AT,           "amend",            TXNVAR_AGENT, TXNVAR_LUA, "where it inserts it") \
	X(AMEND_CUT,          "amend_cut",        TXNVAR_AGENT, TXNVAR_LUA, "the bytes it replaces") \
	X(AMEND_DELTA,        "amend_delta",      TXNVAR_AGENT, TXNVAR_CFG, "the body's change of length") \
	X(PIECE_OFFSET,       "off",              TXNVAR_AGENT | TXNVAR_CFG, TXNVAR_CFG | TXNVAR_SPOE, "the next piece of a long body (3.4)") \
	X(SPOE_ERROR,         "error",            TXNVAR_SPOE | TXNVAR_CFG, TXNVAR_CFG, "SPOE's error code (record)") \
	X(SPOE_TIME,          "ptime",            TXNVAR_SPOE, TXNVAR_OPERATOR, "SPOE's processing time") \
	X(ID,                 "id",               TXNVAR_CFG, TXNVAR_CFG, "HAProxy's unique id (record)") \
	X(SENT_STATUS,        "st",               TXNVAR_CFG, TXNVAR_CFG, "the status HAProxy sent (record)") \
	X(SKIPPED,            "skipped",          TXNVAR_CFG, TXNVAR_CFG, "forwarded undecided under fail-open (record)") \
	X(QUERY,              "q",                TXNVAR_CFG, TXNVAR_SPOE, "a GET /tally/ path's query string (its pages)") \
	X(ANTHROPIC,          "anthropic",        TXNVAR_CFG, TXNVAR_CFG | TXNVAR_LUA, "the request speaks Anthropic's API") \
	X(READ_JSON,          "json",             TXNVAR_CFG, TXNVAR_CFG, "the answer's usage is read by json_query") \
	X(USAGE_MODEL,        "u_model",          TXNVAR_CFG, TXNVAR_CFG, "unary answer: model (record; usage.h)") \
	X(USAGE_ID,           "u_id",             TXNVAR_CFG, TXNVAR_CFG, "unary answer: id") \
	X(USAGE_PROMPT,       "u_pt",             TXNVAR_CFG, TXNVAR_CFG, "unary answer: prompt_tokens") \
	X(USAGE_COMPLETION,   "u_ct",             TXNVAR_CFG, TXNVAR_CFG, "unary answer: completion_tokens") \
	X(USAGE_CACHED,       "u_cached",         TXNVAR_CFG, TXNVAR_CFG, "unary answer: cached tokens") \
	X(USAGE_REASONING,    "u_rt",             TXNVAR_CFG, TXNVAR_CFG, "unary answer: reasoning tokens") \
	X(USAGE_INPUT,        "u_it",             TXNVAR_CFG, TXNVAR_CFG, "unary answer: input_tokens") \
	X(USAGE_OUTPUT,       "u_ot",             TXNVAR_CFG, TXNVAR_CFG, "unary answer: output_tokens") \
	X(USAGE_CACHE_READ,   "u_cr",             TXNVAR_CFG, TXNVAR_CFG, "unary answer: cache_read_input_tokens") \
	X(USAGE_CACHE_WRITE,  "u_cc",             TXNVAR_CFG, TXNVAR_CFG, "unary answer: cache writes") \
	X(USAGE_CACHE_1H,     "u_c1h",            TXNVAR_CFG, TXNVAR_CFG, "unary answer: hour-long cache writes") \
	X(USAGE_AUDIO_IN,     "u_ai",             TXNVAR_CFG, TXNVAR_CFG, "unary answer: audio input tokens") \
	X(USAGE_AUDIO_OUT,    "u_ao",             TXNVAR_CFG, TXNVAR_CFG, "unary answer: audio output tokens") \
	X(USAGE_PREDICTED,    "u_pa",             TXNVAR_CFG, TXNVAR_CFG, "unary answer: accepted prediction tokens") \
	X(USAGE_MISPREDICTED, "u_pr",             TXNVAR_CFG, TXNVAR_CFG, "unary answer: rejected prediction tokens") \
	X(USAGE_WEB_SEARCH,   "u_ws",             TXNVAR_CFG | TXNVAR_LUA, TXNVAR_CFG, "web searches (a stream's too)") \
	X(USAGE_TIER,         "u_tier",           TXNVAR_CFG, TXNVAR_CFG, "unary answer: service tier") \
	X(CAPTURE_SUMMARY,    "cap",              TXNVAR_LUA, TXNVAR_CFG, "what the capture read of the answer (record)") \
	X(SPOILED,            "spoiled",          TXNVAR_LUA, TXNVAR_CFG, "why the filter spoiled a cut body") \
	X(TOO_LARGE,          "too_large",        TXNVAR_LUA, TXNVAR_CFG, "a body past the cap: a or o, the refusal's API")

enum txnvar {
#define TXNVAR_ENUM(id, name, writers, readers, what) TXNVAR_##id,
	TXNVAR_TABLE(TXNVAR_ENUM)
#undef TXNVAR_ENUM
	TXNVAR_COUNT
};

#endif
