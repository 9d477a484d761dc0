/* record: HAProxy's end-of-transaction log record for the agent (the log-format in
 * haproxy/haproxy.cfg) and its framing on the TCP ring connection. Pure functions over
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

/* What vouches for a record (gwsecret.h): the MAC of its id, or, for a record written
 * before any request had an id, its connection's nonce and the nonce's MAC. */
struct record {
	struct record_str mac;             /* len 0: "-" */
	struct record_str nonce;
	struct record_str nmac;
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

/* 1 if the gateway's HAProxy wrote r: its MAC (of the id, or of the nonce for a record
 * without id) is right under the secret m checks. */
int record_authentic(const struct record *r, struct gwsecret_mac *m);

/* The transaction's name: its id, or "haproxy-<nonce>" for a record without id, into
 * out (cap >= ACCT_ID_MAX), cut to fit. */
void record_name(const struct record *r, char *out, size_t cap);

#endif
