/* Unit tests of session: the SPOP conversation driven with frames built here, fed
 * whole, byte by byte and back to back, without sockets. */
#include <string.h>

#include "fixture.h"
#include "longbody.h"
#include "owner.h"
#include "session.h"
#include "spop.h"
#include "unit.h"

static struct fixture fx;

struct buf {
	unsigned char b[65536];
	size_t len;
};

static void put(struct buf *b, const void *p, size_t n)
{
	memcpy(b->b + b->len, p, n);
	b->len += n;
}

static void put_str(struct buf *b, const char *s)
{
	b->len += (size_t)spop_varint_encode(strlen(s), b->b + b->len, 10);
	put(b, s, strlen(s));
}

static void put_kv_str(struct buf *b, const char *k, const char *v)
{
	unsigned char t = SPOP_DATA_STR;

	put_str(b, k);
	put(b, &t, 1);
	put_str(b, v);
}

/* Wraps payload p into a frame appended to out. */
static void frame(struct buf *out, int type, uint32_t flags, uint64_t sid, uint64_t fid,
                  const struct buf *p)
{
	unsigned char hdr[32];
	size_t n = 0;
	uint32_t len;

	hdr[n++] = (unsigned char)type;
	hdr[n++] = (unsigned char)(flags >> 24);
	hdr[n++] = (unsigned char)(flags >> 16);
	hdr[n++] = (unsigned char)(flags >> 8);
	hdr[n++] = (unsigned char)flags;
	n += (size_t)spop_varint_encode(sid, hdr + n, 10);
	n += (size_t)spop_varint_encode(fid, hdr + n, 10);
	len = (uint32_t)(n + p->len);
	out->b[out->len++] = (unsigned char)(len >> 24);
	out->b[out->len++] = (unsigned char)(len >> 16);
	out->b[out->len++] = (unsigned char)(len >> 8);
	out->b[out->len++] = (unsigned char)len;
	put(out, hdr, n);
	put(out, p->b, p->len);
}

static void hello_sized(struct buf *out, int healthcheck, uint32_t max_frame)
{
	struct buf p = { .len = 0 };
	unsigned char t;

	put_kv_str(&p, "supported-versions", "2.0");
	put_str(&p, "max-frame-size");
	t = SPOP_DATA_UINT32;
	put(&p, &t, 1);
	p.len += (size_t)spop_varint_encode(max_frame, p.b + p.len, 10);
	put_kv_str(&p, "capabilities", "pipelining");
	if (healthcheck) {
		put_str(&p, "healthcheck");
		t = SPOP_DATA_BOOL | SPOP_DATA_FLAG_TRUE;
		put(&p, &t, 1);
	}
	frame(out, SPOP_FRAME_HAPROXY_HELLO, SPOP_FLAG_FIN, 0, 0, &p);
}

static void hello(struct buf *out, int healthcheck)
{
	hello_sized(out, healthcheck, 8192);
}

/* A NOTIFY as spoe-tally.conf sends it, with the gateway secret when secret is set. */
static void notify_with(struct buf *out, uint64_t sid, uint64_t fid, const char *auth,
                        const char *body, const char *secret)
{
	struct buf p = { .len = 0 };
	unsigned char nargs = secret ? 6 : 5, t = SPOP_DATA_INT32;

	put_str(&p, SESSION_MESSAGE);
	put(&p, &nargs, 1);
	if (secret)
		put_kv_str(&p, "secret", secret);
	put_kv_str(&p, "auth", auth);
	put_kv_str(&p, "method", "POST");
	put_kv_str(&p, "path", "/v1/chat/completions");
	put_str(&p, "cl");
	put(&p, &t, 1);
	p.len += (size_t)spop_varint_encode(1, p.b + p.len, 10);
	put_kv_str(&p, "body", body);
	frame(out, SPOP_FRAME_NOTIFY, SPOP_FLAG_FIN, sid, fid, &p);
}

static void notify(struct buf *out, uint64_t sid, uint64_t fid, const char *auth, const char *body)
{
	notify_with(out, sid, fid, auth, body, NULL);
}

static void put_kv_int(struct buf *b, const char *k, int64_t n)
{
	unsigned char t = SPOP_DATA_INT64;

	put_str(b, k);
	put(b, &t, 1);
	b->len += (size_t)spop_varint_encode((uint64_t)n, b->b + b->len, 10);
}

static void put_kv_bin(struct buf *b, const char *k, const char *v, size_t n)
{
	unsigned char t = SPOP_DATA_BIN;

	put_str(b, k);
	put(b, &t, 1);
	b->len += (size_t)spop_varint_encode(n, b->b + b->len, 10);
	put(b, v, n);
}

/* A piece of a long body of size bytes as spoe-tally.conf sends it on HAProxy 3.4+: len
 * bytes at off. */
static void piece(struct buf *out, uint64_t sid, const char *id, const char *auth, int64_t off,
                  const char *body, int64_t size, size_t len)
{
	struct buf p = { .len = 0 };
	unsigned char nargs = 5;

	put_str(&p, SESSION_PIECE_MESSAGE);
	put(&p, &nargs, 1);
	put_kv_str(&p, "id", id);
	put_kv_str(&p, "auth", auth);
	put_kv_int(&p, "off", off);
	put_kv_int(&p, "bsize", size);
	put_kv_bin(&p, "data", body + off, len);
	frame(out, SPOP_FRAME_NOTIFY, SPOP_FLAG_FIN, sid, sid, &p);
}

/* The decision's NOTIFY on path for a body of size bytes of which HAProxy sends the
 * first cap. */
static void notify_cut_on(struct buf *out, uint64_t sid, const char *id, const char *auth,
                          const char *path, const char *body, size_t size, size_t cap)
{
	struct buf p = { .len = 0 };
	unsigned char nargs = 7;

	put_str(&p, SESSION_MESSAGE);
	put(&p, &nargs, 1);
	put_kv_str(&p, "id", id);
	put_kv_str(&p, "auth", auth);
	put_kv_str(&p, "method", "POST");
	put_kv_str(&p, "path", path);
	put_kv_int(&p, "cl", 1);
	put_kv_int(&p, "bsize", (int64_t)size);
	put_kv_bin(&p, "body", body, size < cap ? size : cap);
	frame(out, SPOP_FRAME_NOTIFY, SPOP_FLAG_FIN, sid, sid, &p);
}

static void notify_cut(struct buf *out, uint64_t sid, const char *id, const char *auth,
                       const char *body, size_t size, size_t cap)
{
	notify_cut_on(out, sid, id, auth, "/v1/chat/completions", body, size, cap);
}

/* Decodes every frame in out; returns how many, checking each type in order. */
static int frames_of(const unsigned char *b, size_t len, const int *types, struct spop_frame *last)
{
	int n = 0;

	while (len) {
		struct spop_frame f;
		enum spop_status err;
		size_t used;

		if (spop_frame_decode(b, len, 1 << 20, &f, &used, &err) != 1)
			return -1;
		if (types[n] != (int)f.type)
			return -1;
		*last = f;
		n++;
		b += used;
		len -= used;
	}
	return n;
}

static void test_hello_then_notifies_byte_by_byte(void)
{
	static unsigned char outbuf[1 << 16];
	struct buf in = { .len = 0 };
	struct session s;
	struct spop_writer w;
	struct spop_frame last;
	size_t fed = 0, pending = 0, used;
	const int want[] = { SPOP_FRAME_AGENT_HELLO, SPOP_FRAME_ACK, SPOP_FRAME_ACK };

	hello(&in, 0);
	notify(&in, 1ULL << 40, 7, "Bearer " FIX_KEY_OPEN, "{\"model\":\"gpt-a\"}");
	notify(&in, 2, 8, "Bearer nope", "{}");
	session_init(&s, 16380);
	spop_writer_init(&w, outbuf, sizeof(outbuf));
	/* bytes arrive one at a time; unconsumed ones are fed again with the next */
	while (fed < in.len) {
		pending++;
		fed++;
		CHECK_EQ_INT(session_feed(&s, fx.kt, in.b + fed - pending, pending, &used, &w),
		             SESSION_CONTINUE);
		pending -= used;
	}
	CHECK_EQ_INT(pending, 0);
	CHECK_EQ_INT(s.max_frame_size, 8192);
	CHECK_EQ_INT(frames_of(outbuf, w.len, want, &last), 3);
	CHECK_EQ_INT(last.stream_id, 2);
	CHECK_EQ_INT(last.frame_id, 8);
	CHECK_EQ_INT(s.stats.verdicts[DECISION_ALLOW], 1);
	CHECK_EQ_INT(s.stats.verdicts[DECISION_UNKNOWN_KEY], 1);
}

static void test_healthcheck_closes(void)
{
	static unsigned char outbuf[1 << 16];
	struct buf in = { .len = 0 };
	struct session s;
	struct spop_writer w;
	struct spop_frame last;
	size_t used;
	const int want[] = { SPOP_FRAME_AGENT_HELLO };

	hello(&in, 1);
	session_init(&s, 16380);
	spop_writer_init(&w, outbuf, sizeof(outbuf));
	CHECK_EQ_INT(session_feed(&s, fx.kt, in.b, in.len, &used, &w), SESSION_CLOSE);
	CHECK_EQ_INT(frames_of(outbuf, w.len, want, &last), 1);
}

static void test_stops_when_output_is_full(void)
{
	static unsigned char outbuf[8192 + 4 + 300];
	struct buf in = { .len = 0 };
	struct session s;
	struct spop_writer w;
	size_t used, total = 0;
	int i;

	hello(&in, 0);
	for (i = 0; i < 10; i++)
		notify(&in, (uint64_t)i, 1, "Bearer " FIX_KEY_OPEN, "{\"model\":\"gpt-a\"}");
	session_init(&s, 8192);
	spop_writer_init(&w, outbuf, sizeof(outbuf));
	CHECK_EQ_INT(session_feed(&s, fx.kt, in.b, in.len, &used, &w), SESSION_CONTINUE);
	/* room for a largest reply is kept, so not every frame was consumed */
	CHECK(used < in.len);
	total = used;
	while (total < in.len) {
		spop_writer_init(&w, outbuf, sizeof(outbuf));
		CHECK_EQ_INT(session_feed(&s, fx.kt, in.b + total, in.len - total, &used, &w),
		             SESSION_CONTINUE);
		if (used == 0)
			break;
		total += used;
	}
	CHECK_EQ_INT(total, in.len);
	CHECK_EQ_INT(s.stats.notifies, 10);
}

static void test_notify_before_hello_disconnects(void)
{
	static unsigned char outbuf[1 << 16];
	struct buf in = { .len = 0 };
	struct session s;
	struct spop_writer w;
	struct spop_frame last;
	size_t used;
	const int want[] = { SPOP_FRAME_AGENT_DISCONNECT };
	uint32_t status;
	struct spop_str msg;

	notify(&in, 1, 1, "Bearer x", "{}");
	session_init(&s, 16380);
	spop_writer_init(&w, outbuf, sizeof(outbuf));
	CHECK_EQ_INT(session_feed(&s, fx.kt, in.b, in.len, &used, &w), SESSION_CLOSE);
	CHECK_EQ_INT(frames_of(outbuf, w.len, want, &last), 1);
	CHECK_EQ_INT(spop_disconnect_parse(&last, &status, &msg), 0);
	CHECK_EQ_INT(status, SPOP_ERR_INVALID);
}

static void test_acks_respect_a_small_frame_size(void)
{
	static unsigned char outbuf[1 << 16];
	char body[600];
	struct buf in = { .len = 0 };
	struct session s;
	struct spop_writer w;
	struct spop_frame last;
	size_t used;
	const int want[] = { SPOP_FRAME_AGENT_HELLO, SPOP_FRAME_ACK };

	/* an unknown 90-character model: the full ACK, whose error body quotes it, is
	 * larger than 256 bytes, while the NOTIFY still fits */
	snprintf(body, sizeof(body), "{\"model\":\"%090d\"}", 7);
	hello_sized(&in, 0, 256);
	notify(&in, 1, 1, "Bearer " FIX_KEY_OPEN, body);
	session_init(&s, 16380);
	spop_writer_init(&w, outbuf, sizeof(outbuf));
	CHECK_EQ_INT(session_feed(&s, fx.kt, in.b, in.len, &used, &w), SESSION_CONTINUE);
	CHECK_EQ_INT(frames_of(outbuf, w.len, want, &last), 2);
	CHECK(last.payload_len + 13 <= 256);
	/* the brief ACK still carries the verdict and the status, not the body */
	CHECK(memmem(last.payload, last.payload_len, "model_not_found", 15) != NULL);
	CHECK(memmem(last.payload, last.payload_len, "status", 6) != NULL);
	CHECK(memmem(last.payload, last.payload_len, "body", 4) == NULL);
	CHECK_EQ_INT(s.stats.verdicts[DECISION_UNKNOWN_MODEL], 1);
}

static int decided_calls;
static int decided_result;

static int on_decided(void *arg, struct spop_str id, const struct decision *d)
{
	(void)arg;
	(void)id;
	(void)d;
	decided_calls++;
	return decided_result;
}

/* Only NOTIFYs carrying the gateway secret are decided and recorded; one the pending
 * table cannot take is refused as busy. */
static void test_gateway_secret_and_busy(void)
{
	static unsigned char outbuf[1 << 16];
	struct buf in = { .len = 0 };
	struct session s;
	struct spop_writer w;
	struct spop_frame last;
	struct gwsecret gw;
	unsigned char key[KEYHASH_SECRET_LEN] = { 7 };
	size_t used, notify_end;
	const int want[] = { SPOP_FRAME_AGENT_HELLO, SPOP_FRAME_ACK, SPOP_FRAME_ACK, SPOP_FRAME_ACK,
	                     SPOP_FRAME_ACK };
	const char *body = "{\"model\":\"gpt-a\"}";

	gwsecret_derive(key, &gw);
	hello(&in, 0);
	notify(&in, 1, 1, "Bearer " FIX_KEY_OPEN, body);
	notify_with(&in, 2, 2, "Bearer " FIX_KEY_OPEN, body, "d3JvbmctZ2F0ZXdheS1zZWNyZXQtd3Jvbmc=");
	notify_end = in.len;
	notify_with(&in, 3, 3, "Bearer " FIX_KEY_OPEN, body, gw.text);
	notify_with(&in, 4, 4, "Bearer " FIX_KEY_OPEN, body, gw.text);
	session_init(&s, 16380);
	s.secret = &gw;
	s.on_decided = on_decided;
	decided_calls = 0;
	decided_result = 0;
	/* The connection is not the gateway's HAProxy's until a NOTIFY shows the secret. */
	spop_writer_init(&w, outbuf, sizeof(outbuf));
	CHECK_EQ_INT(session_feed(&s, fx.kt, in.b, notify_end, &used, &w), SESSION_CONTINUE);
	CHECK_EQ_INT(used, notify_end);
	CHECK_EQ_INT(s.authentic, 0);
	session_init(&s, 16380);
	s.secret = &gw;
	s.on_decided = on_decided;
	decided_calls = 0;
	spop_writer_init(&w, outbuf, sizeof(outbuf));
	/* up to the third NOTIFY, then the fourth with a full pending table */
	CHECK_EQ_INT(session_feed(&s, fx.kt, in.b, in.len, &used, &w), SESSION_CONTINUE);
	CHECK_EQ_INT(s.authentic, 1);
	CHECK_EQ_INT(s.stats.verdicts[DECISION_UNAUTHENTICATED], 2);
	CHECK_EQ_INT(s.stats.verdicts[DECISION_ALLOW], 2);
	CHECK_EQ_INT(decided_calls, 2);
	CHECK_EQ_INT(frames_of(outbuf, w.len, want, &last), 5);
	CHECK(memmem(last.payload, last.payload_len, "allow", 5) != NULL);
	in.len = 0;
	notify_with(&in, 5, 5, "Bearer " FIX_KEY_OPEN, body, gw.text);
	decided_result = -1;
	spop_writer_init(&w, outbuf, sizeof(outbuf));
	CHECK_EQ_INT(session_feed(&s, fx.kt, in.b, in.len, &used, &w), SESSION_CONTINUE);
	CHECK_EQ_INT(decided_calls, 3);
	CHECK_EQ_INT(s.stats.verdicts[DECISION_BUSY], 1);
	CHECK(memmem(outbuf, w.len, "gateway_busy", 12) != NULL);
	CHECK(memmem(outbuf, w.len, "overloaded", 10) == NULL);
}

/* Feeds in to s; returns the output's length in outbuf. */
static size_t feed_all(struct session *s, const struct buf *in, unsigned char *outbuf, size_t cap)
{
	struct spop_writer w;
	size_t used;

	spop_writer_init(&w, outbuf, cap);
	CHECK_EQ_INT(session_feed(s, fx.kt, in->b, in->len, &used, &w), SESSION_CONTINUE);
	CHECK_EQ_INT(used, in->len);
	return w.len;
}

/* Whether out holds the ACK action that sets txn.tally.off to n (n < 0: unsets it). */
static int acks_offset(const unsigned char *out, size_t len, int64_t n)
{
	unsigned char want[64];
	struct spop_writer w;
	struct spop_data v = { .type = SPOP_DATA_INT64 };

	spop_writer_init(&w, want, sizeof(want));
	v.u.i64 = n;
	if (n < 0)
		spop_put_unset_var(&w, SPOP_SCOPE_TXN, "off", 3);
	else
		spop_put_set_var(&w, SPOP_SCOPE_TXN, "off", 3, &v);
	return memmem(out, len, want, w.len) != NULL;
}

/* Sends body in pieces of 15000 bytes as HAProxy does, each after the last one's ACK
 * named its offset, then the decision on its first 13312 bytes; returns the verdicts
 * counted meanwhile of kind v. */
static int judge_long(struct session *s, const char *id, const char *auth, const char *body,
                      int with_pieces, enum decision_verdict v)
{
	static unsigned char outbuf[1 << 16];
	struct buf in = { .len = 0 };
	size_t len = strlen(body), off = 0, n;
	int before = s->stats.verdicts[v];

	while (with_pieces && off < len) {
		n = len - off < 15000 ? len - off : 15000;
		in.len = 0;
		piece(&in, 7, id, auth, (int64_t)off, body, (int64_t)len, n);
		n = feed_all(s, &in, outbuf, sizeof(outbuf));
		off += len - off < 15000 ? len - off : 15000;
		CHECK(acks_offset(outbuf, n, off < len ? (int64_t)off : -1));
	}
	in.len = 0;
	notify_cut(&in, 8, id, auth, body, len, 13312);
	feed_all(s, &in, outbuf, sizeof(outbuf));
	return s->stats.verdicts[v] - before;
}

/* Long bodies sent in pieces (HAProxy 3.4+) are judged whole: a key restricted to some
 * models is judged on the model past the cut rather than refused, and every rule of a
 * whole body holds; pieces of unknown keys, of a body whose size changes (a chunked one
 * still arriving) or out of order take no room and end the pieces. */
static void test_long_body_pieces(void)
{
	static char body[60000], twice[60000];
	static unsigned char outbuf[1 << 16];
	const char *auth = "Bearer " FIX_KEY_RESTRICTED;
	struct buf in = { .len = 0 };
	struct session s;
	char prompt[40001];
	size_t n;

	memset(prompt, 'x', sizeof(prompt) - 1);
	prompt[sizeof(prompt) - 1] = '\0';
	session_init(&s, 16380);
	s.longbody = longbody_new(1 << 20, 1 << 20);
	hello_sized(&in, 0, 16380);
	feed_all(&s, &in, outbuf, sizeof(outbuf));
	snprintf(body, sizeof(body), "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],"
	         "\"model\":\"gpt-b\"}", prompt);
	CHECK_EQ_INT(judge_long(&s, "id-1", auth, body, 1, DECISION_ALLOW), 1);
	CHECK_EQ_INT(longbody_bytes(s.longbody), 0);
	snprintf(body, sizeof(body), "{\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],"
	         "\"model\":\"gpt-a\"}", prompt);
	CHECK_EQ_INT(judge_long(&s, "id-2", auth, body, 1, DECISION_MODEL_FORBIDDEN), 1);
	/* without its pieces the prefix names no model: left to the capture filter */
	CHECK_EQ_INT(judge_long(&s, "id-3", auth, body, 0, DECISION_ALLOW), 1);
	/* a second model past the cut is a body no rule lets through */
	snprintf(twice, sizeof(twice), "{\"model\":\"gpt-b\",\"messages\":[{\"role\":\"user\","
	         "\"content\":\"%s\"}],\"model\":\"gpt-a\"}", prompt);
	CHECK_EQ_INT(judge_long(&s, "id-4", auth, twice, 1, DECISION_BAD_BODY), 1);
	CHECK_EQ_INT(longbody_bytes(s.longbody), 0);

	/* an unknown key's first piece is not kept */
	in.len = 0;
	piece(&in, 9, "id-5", "Bearer tly_unknown", 0, body, (int64_t)strlen(body), 15000);
	n = feed_all(&s, &in, outbuf, sizeof(outbuf));
	CHECK(acks_offset(outbuf, n, -1) && !acks_offset(outbuf, n, 15000));
	CHECK_EQ_INT(longbody_bytes(s.longbody), 0);
	/* a body whose size changed between pieces, or a piece out of order, is dropped */
	in.len = 0;
	piece(&in, 10, "id-6", auth, 0, body, 20000, 15000);
	piece(&in, 11, "id-6", auth, 15000, body, (int64_t)strlen(body), 5000);
	n = feed_all(&s, &in, outbuf, sizeof(outbuf));
	CHECK(acks_offset(outbuf, n, 15000) && acks_offset(outbuf, n, -1));
	CHECK_EQ_INT(longbody_bytes(s.longbody), 0);
	in.len = 0;
	piece(&in, 12, "id-7", auth, 0, body, (int64_t)strlen(body), 15000);
	piece(&in, 13, "id-7", auth, 20000, body, (int64_t)strlen(body), 100);
	feed_all(&s, &in, outbuf, sizeof(outbuf));
	CHECK_EQ_INT(longbody_bytes(s.longbody), 0);
	CHECK_EQ_INT(s.stats.bad_messages, 0);
	longbody_free(s.longbody);
}

/* A long body naming a stored response the key may be about to own: HAProxy asks again
 * (wait), and the body is judged whole then too. */
static void test_long_body_asked_again(void)
{
	static char body[60000];
	static unsigned char outbuf[1 << 16];
	const char *auth = "Bearer " FIX_KEY_OPEN;
	struct buf in = { .len = 0 };
	struct session s;
	char prompt[40001];
	size_t len, off, n;
	int round;

	memset(prompt, 'x', sizeof(prompt) - 1);
	prompt[sizeof(prompt) - 1] = '\0';
	session_init(&s, 16380);
	s.longbody = longbody_new(1 << 20, 1 << 20);
	s.owners = owner_new(8);
	owner_creating(s.owners, 1, 1);
	hello_sized(&in, 0, 16380);
	feed_all(&s, &in, outbuf, sizeof(outbuf));
	snprintf(body, sizeof(body), "{\"model\":\"gpt-a\",\"input\":\"%s\","
	         "\"previous_response_id\":\"resp_soon\"}", prompt);
	len = strlen(body);
	for (off = 0; off < len; off += n) {
		n = len - off < 15000 ? len - off : 15000;
		in.len = 0;
		piece(&in, 7, "id-w", auth, (int64_t)off, body, (int64_t)len, n);
		feed_all(&s, &in, outbuf, sizeof(outbuf));
	}
	for (round = 0; round < 2; round++) {
		/* the second time the create's record has come */
		if (round) {
			owner_put(s.owners, "resp_soon", 1, "gpt-a", 0);
			owner_creating(s.owners, 1, -1);
		}
		in.len = 0;
		notify_cut_on(&in, 8, "id-w", auth, "/v1/responses", body, len, 13312);
		feed_all(&s, &in, outbuf, sizeof(outbuf));
		CHECK_EQ_INT(s.stats.verdicts[round ? DECISION_ALLOW : DECISION_UNKNOWN_RESPONSE], 1);
		CHECK(round ? longbody_bytes(s.longbody) == 0 : longbody_bytes(s.longbody) >= len);
	}
	CHECK_EQ_INT(s.stats.verdicts[DECISION_STORED_STATE], 0);
	owner_free(s.owners);
	longbody_free(s.longbody);
}

int main(void)
{
	if (fixture_open(&fx) < 0)
		return 1;
	RUN(test_hello_then_notifies_byte_by_byte);
	RUN(test_healthcheck_closes);
	RUN(test_stops_when_output_is_full);
	RUN(test_notify_before_hello_disconnects);
	RUN(test_acks_respect_a_small_frame_size);
	RUN(test_gateway_secret_and_busy);
	RUN(test_long_body_pieces);
	RUN(test_long_body_asked_again);
	fixture_close(&fx);
	return UNIT_DONE();
}
