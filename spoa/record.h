/* record: HAProxy's end-of-transaction log record for the agent (the log-format in
 * haproxy/tally.cfg) and its framing on the TCP ring connection. Pure functions over
 * peer input: bounded, no allocation; views borrow the input buffer. Intake thread. */
#ifndef TALLY_RECORD_H
#define TALLY_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "acct-t.h"
#include "gwsecret.h"

struct record_str {
	const char *ptr;
	size_t len;
};

enum record_usage_field {
	RECORD_U_PROMPT, RECORD_U_COMPLETION, RECORD_U_CACHED, RECORD_U_REASONING,
	RECORD_U_INPUT, RECORD_U_OUTPUT, RECORD_U_CACHE_READ, RECORD_U_CACHE_CREATION,
	/* tally4: the classes priced apart (docs/pricing.md) */
	RECORD_U_CACHE_1H, RECORD_U_AUDIO_INPUT, RECORD_U_AUDIO_OUTPUT,
	RECORD_U_PREDICTION_ACCEPTED, RECORD_U_PREDICTION_REJECTED, RECORD_U_WEB_SEARCH,
	RECORD_U_COUNT
};

#define RECORD_NONCE_MAX 64

/* Flags of a record field (RECORD_FIELD_TABLE). */
#define RECORD_MACD   1   /* its variable is in the MAC's concat() chain */
#define RECORD_URLENC 2   /* printed with url_enc */

/* The record's fields in the order the log-format of haproxy/tally.cfg prints them,
 * once for every side: X(NAME, PRINTED, VAR, FLAGS). PRINTED is what the log-format
 * prints for a field that is no variable (NULL: "%[var(VAR)]", with url_enc under
 * RECORD_URLENC); VAR, when not NULL, is the transaction variable the field carries, in
 * the MAC when FLAGS has RECORD_MACD (the status is printed as %ST and MAC'd as the
 * variable http-after-response set). MAC, (NULL, NULL), is the MAC itself: of "tally5",
 * the termination flag and, after a \x01 each, the MAC'd variables in this order.
 * scripts/recformat.c prints the log-format from this table; tests/test_contract.py
 * compares it with haproxy/tally.cfg's. A "tally5" record has every field, the last
 * one the capture; the log-formats before it printed fewer (record.c). */
#define RECORD_FIELD_TABLE(X) \
	X(TAG,         "tally5",            NULL,                 0) \
	X(MAC,         NULL,                NULL,                 0) \
	X(NONCE,       NULL,                "sess.tally.nonce",   RECORD_MACD) \
	X(TERM_MAC,    "${TALLY_TERM_MAC}", NULL,                 0) \
	X(ID,          NULL,                "txn.tally.id",       RECORD_MACD) \
	X(ACCEPT_S,    "%Ts",               NULL,                 0) \
	X(ACCEPT_MS,   "%ms",               NULL,                 0) \
	X(STATUS,      "%ST",               "txn.tally.st",       RECORD_MACD) \
	X(BYTES_IN,    "%U",                NULL,                 0) \
	X(BYTES_OUT,   "%B",                NULL,                 0) \
	X(TR,          "%TR",               NULL,                 0) \
	X(TW,          "%Tw",               NULL,                 0) \
	X(TC,          "%Tc",               NULL,                 0) \
	X(TR_SERVER,   "%Tr",               NULL,                 0) \
	X(TA,          "%Ta",               NULL,                 0) \
	X(TERMINATION, "%ts",               NULL,                 0) \
	X(BACKEND,     "%b",                NULL,                 0) \
	X(VERDICT,     NULL,                "txn.tally.verdict",  RECORD_MACD) \
	X(KEY_ID,      NULL,                "txn.tally.key_id",   RECORD_MACD) \
	X(MODEL,       NULL,                "txn.tally.model",    RECORD_MACD | RECORD_URLENC) \
	X(PROVIDER,    NULL,                "txn.tally.provider", RECORD_MACD | RECORD_URLENC) \
	X(STREAM,      NULL,                "txn.tally.stream",   RECORD_MACD) \
	X(SKIPPED,     NULL,                "txn.tally.skipped",  RECORD_MACD) \
	X(SPOE_ERROR,  NULL,                "txn.tally.error",    RECORD_MACD) \
	X(U_MODEL,     NULL,                "txn.tally.u_model",  RECORD_MACD | RECORD_URLENC) \
	X(U_PT,        NULL,                "txn.tally.u_pt",     RECORD_MACD) \
	X(U_CT,        NULL,                "txn.tally.u_ct",     RECORD_MACD) \
	X(U_CACHED,    NULL,                "txn.tally.u_cached", RECORD_MACD) \
	X(U_RT,        NULL,                "txn.tally.u_rt",     RECORD_MACD) \
	X(U_IT,        NULL,                "txn.tally.u_it",     RECORD_MACD) \
	X(U_OT,        NULL,                "txn.tally.u_ot",     RECORD_MACD) \
	X(U_CR,        NULL,                "txn.tally.u_cr",     RECORD_MACD) \
	X(U_CC,        NULL,                "txn.tally.u_cc",     RECORD_MACD) \
	X(U_ID,        NULL,                "txn.tally.u_id",     RECORD_MACD | RECORD_URLENC) \
	X(U_C1H,       NULL,                "txn.tally.u_c1h",    RECORD_MACD) \
	X(U_AI,        NULL,                "txn.tally.u_ai",     RECORD_MACD) \
	X(U_AO,        NULL,                "txn.tally.u_ao",     RECORD_MACD) \
	X(U_PA,        NULL,                "txn.tally.u_pa",     RECORD_MACD) \
	X(U_PR,        NULL,                "txn.tally.u_pr",     RECORD_MACD) \
	X(U_WS,        NULL,                "txn.tally.u_ws",     RECORD_MACD) \
	X(U_TIER,      NULL,                "txn.tally.u_tier",   RECORD_MACD | RECORD_URLENC) \
	X(CAP,         NULL,                "txn.tally.cap",      RECORD_MACD)

enum record_field {
#define RECORD_FIELD_ENUM(name, printed, var, flags) RECORD_F_##name,
	RECORD_FIELD_TABLE(RECORD_FIELD_ENUM)
#undef RECORD_FIELD_ENUM
	RECORD_FIELDS
};

/* What vouches for a record (gwsecret.h, record_authentic): in a "tally5" one, the MAC of
 * every field the agent uses, and on HAProxy versions with a fetch for it (3.4+) the MAC
 * of its termination state. Records of the log-formats before it ("tally2" to "tally4")
 * are still parsed, but never authentic: their MAC vouched for the id alone. */
struct record {
	char version;                      /* '2' to '5' */
	struct record_str field[RECORD_FIELDS];  /* as printed; nfields of them */
	int nfields;
	struct record_str mac;             /* len 0: "-" */
	struct record_str nonce;
	struct record_str tmac;            /* tally5: the termination state's MAC; len 0:
	                                    * none (HAProxy before 3.4) */
	struct record_str id;              /* HAProxy's unique id; len 0: it had none */
	int64_t accept_s, accept_ms;
	int64_t status;                    /* -1: none */
	int64_t bytes_in, bytes_out;
	int64_t tr, tw, tc, ta;            /* -1: not reached */
	int64_t tr_server;                 /* %Tr: the upstream's response time */
	struct record_str termination;     /* two characters */
	struct record_str backend;
	struct record_str verdict;         /* len 0: the agent never decided */
	int64_t key_id;                    /* ACCT_NONE: absent */
	char model[ACCT_NAME_MAX];         /* decoded; "" absent */
	char provider[ACCT_SHORT_MAX];
	int64_t stream;                    /* 0, 1, ACCT_NONE */
	int skipped;                       /* forwarded undecided under fail-open */
	int64_t spoe_error;                /* ACCT_NONE: none */
	char u_model[ACCT_NAME_MAX];       /* unary JSON response's model; "" absent or
	                                    * unstorable */
	int64_t u[RECORD_U_COUNT];         /* unary JSON usage; ACCT_NONE absent, negative */
	struct record_str u_id;            /* unary JSON answer's id; len 0: absent */
	struct record_str u_tier;          /* its service tier (tier_name_ok); len 0: absent */
	int has_capture;                   /* 0 also when the capture field is broken */
	char cap_kind;                     /* 'j', 's' or 'o' */
	int64_t body_bytes;
	struct record_str summary;         /* what the capture read of the answer
	                                    * (spoa/usage.h) */
};

/* Splits one record off a TCP stream. Octet-counted ("<len> <msg>", RFC 6587) when
 * buf starts with a digit, else newline-terminated. Returns 1 with msg set and
 * *consumed the bytes to drop, 0 when more bytes are needed, -1 when the framing is
 * broken or a record exceeds max_len (the connection must be closed). */
int record_frame_next(const char *buf, size_t len, size_t max_len,
                      const char **msg, size_t *msg_len, size_t *consumed);

/* Parses one record (a trailing "\n" is allowed). 0, or -1 if malformed or if nothing
 * names it (neither an id nor a nonce). Integers are bounded (|n| < 2^53) so that sums
 * of fields cannot overflow; status is -1..999. */
int record_parse(const char *buf, size_t len, struct record *out);

/* 1 if the gateway's HAProxy wrote r: a tally5 record whose MAC under the secret m
 * checks is right over the fields as received (the "-" of an absent one as empty,
 * url-encoded ones decoded, joined by RECORD_MAC_SEP: tally.cfg's log-format builds
 * the same with concat()), whose id starts with its accept time (unique-id-format) and,
 * when the MAC says HAProxy sent one, whose termination-state MAC is right too. What it
 * does not cover: the timers, the byte counts, the backend, the termination state of
 * HAProxy before 3.4 and of a record without id, and the status of a transaction
 * answered without http-after-response, then taken only if not 2xx
 * (docs/haproxy-integration.md says what that allows). */
#define RECORD_MAC_SEP '\x01'

int record_authentic(const struct record *r, struct gwsecret_mac *m);

/* The transaction's name: its id, or "haproxy-<nonce>" for a record without id, into
 * out (cap >= ACCT_ID_MAX), cut to fit. */
void record_name(const struct record *r, char *out, size_t cap);

#endif
