/* session: the SPOP conversation on one HAProxy connection (HELLO, NOTIFY/ACK,
 * DISCONNECT), free of sockets so that it can be unit-tested and fuzzed. The I/O
 * thread that owns the connection feeds it received bytes and sends what it writes. */
#ifndef TALLY_SESSION_H
#define TALLY_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "decision.h"
#include "gwsecret.h"
#include "keytable-t.h"
#include "spop-t.h"

struct longbody;
struct owner;
struct usageview;

/* The SPOE message our haproxy/spoe-tally.conf sends at request time, and the one that
 * carries a piece of a long body before it (HAProxy 3.4+, longbody.h). */
#define SESSION_MESSAGE "tally-request"
#define SESSION_PIECE_MESSAGE "tally-piece"

/* The longest body an ACK carries: a model list, a usage answer (an error body takes
 * 2048 at most). */
#define SESSION_BODY_MAX 14336

enum session_state { SESSION_WAIT_HELLO, SESSION_READY, SESSION_CLOSED };

struct session_stats {
	uint64_t notifies;
	uint64_t bad_messages;    /* NOTIFYs whose messages could not be read (agent_error) */
	uint64_t skipped_frames;  /* of types this agent does not know */
	uint64_t verdicts[DECISION_VERDICT_COUNT];
};

/* Called for every NOTIFY from HAProxy once decided, before its ACK is written: the I/O
 * thread records the transaction for accounting there. id borrows the frame (valid
 * during the call only); it is empty if HAProxy sent none. Returns 0, or -1 when the
 * transaction cannot be recorded (the pending table is full): the request is then
 * refused as DECISION_BUSY, its hold already given back. */
typedef int session_decided_fn(void *arg, struct spop_str id, const struct decision *d);

struct session {
	enum session_state state;
	uint32_t max_frame_size;  /* ours until HELLO, then the negotiated one */
	struct session_stats stats;
	session_decided_fn *on_decided;   /* may be NULL; set after session_init */
	void *decided_arg;
	struct quota *quota;             /* may be NULL (no limits enforced); borrowed */
	int64_t default_max_tokens;       /* the reservation's output when a body names none */
	/* What HAProxy's NOTIFYs carry; a NOTIFY without it did not come from the gateway's
	 * HAProxy: refused, counted, never recorded. NULL: not checked (tests). Borrowed. */
	const struct gwsecret *secret;
	/* Long bodies in assembly, shared by every connection; NULL: pieces are refused and
	 * long bodies judged on their first frame. Borrowed. */
	struct longbody *longbody;
	/* Who made which stored response; NULL: none known (every ID is unknown).
	 * Borrowed. */
	struct owner *owners;
	/* What keys without their own say may ask for that costs more; NULL: the
	 * defaults. Borrowed. */
	const struct decision_policy *policy;
	/* Keys' and teams' spend for GET /tally/v1/usage; NULL: it answers 503. Borrowed. */
	struct usageview *usage;
	/* 1 once a NOTIFY carried the secret (any well-formed one when secret is NULL): the
	 * connection is the gateway's HAProxy's (worker.c bounds the others). */
	int authentic;
};

enum session_result {
	SESSION_CONTINUE,
	SESSION_CLOSE,            /* send what was written, then close the connection */
};

/* max_frame_size: the largest frame this agent accepts and announces (>= 256). */
void session_init(struct session *s, uint32_t max_frame_size);

/* Consumes whole frames from in[0..len) while out has room for a reply of the largest
 * frame size, appending replies to out. *consumed tells how many bytes were used; the
 * rest (a partial frame, or frames left for lack of room) must be fed again later.
 * kt is borrowed for the call. On any protocol error it writes an AGENT-DISCONNECT
 * with the matching status and returns SESSION_CLOSE. */
enum session_result session_feed(struct session *s, const struct keytable *kt,
                                 const unsigned char *in, size_t len, size_t *consumed,
                                 struct spop_writer *out);

#endif
