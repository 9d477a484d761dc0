/* control: the control socket (see control.h and docs/control.md). Main thread.
 *
 * Each request frame gets exactly one reply frame, {"ok": true, ...} or {"ok": false,
 * "error": ...}; only an over-size frame, whose end we would have to skip unread, also
 * closes the connection. Replies are packed with msgpack-c into a buffer owned by the
 * control object, then copied to the connection: arrays whose length is known only
 * after the live view's callbacks ran are packed apart and appended after their
 * header. */
#include "control.h"

#include <msgpack.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "adminsrv.h"
#include "log.h"
#include "mpcheck.h"
#include "net.h"
#include "statsnap.h"

/* Reply buffers larger than this are freed after use, not kept for the next one. */
#define CONTROL_BUF_KEEP 65536

/* A msgpack output that remembers a failed write, so that one check after packing
 * covers every pack call. */
struct control_buf {
	msgpack_sbuffer sb;
	msgpack_packer pk;
	int failed;
};

struct control {
	struct adminsrv *srv;
	const struct live_view *live;
	char *path;
	dev_t dev;                   /* the socket file made at start: stop removes only it */
	ino_t ino;
	uint64_t started_ns;
	struct control_buf reply;
	struct control_buf items;    /* array elements, while counting them */
	size_t nitems;
};

/* ---- decoding ---- */

enum control_frame control_frame_parse(const unsigned char *in, size_t len, size_t *payload_len)
{
	uint32_t n;

	if (len < 4)
		return CONTROL_FRAME_PARTIAL;
	n = (uint32_t)in[0] << 24 | (uint32_t)in[1] << 16 | (uint32_t)in[2] << 8 | in[3];
	*payload_len = n;
	if (n > CONTROL_FRAME_MAX)
		return CONTROL_FRAME_TOO_LARGE;
	return len - 4 >= n ? CONTROL_FRAME_WHOLE : CONTROL_FRAME_PARTIAL;
}

static int control_str_is(const msgpack_object *o, const char *s)
{
	return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
	       memcmp(o->via.str.ptr, s, o->via.str.size) == 0;
}

/* Reads the fields of a request map; unknown keys are ignored, so that newer clients
 * may send more. */
static const char *control_request_fields(const msgpack_object_map *map,
                                          struct control_request *req)
{
	int have_cmd = 0;
	uint32_t i;

	req->max = CONTROL_INFLIGHT_DEFAULT;
	for (i = 0; i < map->size; i++) {
		const msgpack_object *k = &map->ptr[i].key, *v = &map->ptr[i].val;

		if (control_str_is(k, "cmd")) {
			if (control_str_is(v, "status"))
				req->cmd = CONTROL_STATUS;
			else if (control_str_is(v, "keys"))
				req->cmd = CONTROL_KEYS;
			else if (control_str_is(v, "inflight"))
				req->cmd = CONTROL_INFLIGHT;
			else
				return "unknown cmd (want status, keys or inflight)";
			have_cmd = 1;
		} else if (control_str_is(k, "max")) {
			if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
				return "max must be a non-negative integer";
			req->max = v->via.u64 < CONTROL_INFLIGHT_CAP ? (size_t)v->via.u64
			                                             : CONTROL_INFLIGHT_CAP;
		}
	}
	return have_cmd ? NULL : "no cmd in the request";
}

const char *control_request_decode(const unsigned char *data, size_t len,
                                   struct control_request *req)
{
	msgpack_unpacked u;
	size_t off = 0;
	const char *err;

	if (mpcheck_bounded(data, data + len) < 0)
		return "not a msgpack object";
	msgpack_unpacked_init(&u);
	switch (msgpack_unpack_next(&u, (const char *)data, len, &off)) {
	case MSGPACK_UNPACK_SUCCESS:
		if (off != len)
			err = "bytes after the request object";
		else if (u.data.type != MSGPACK_OBJECT_MAP)
			err = "the request is not a map";
		else
			err = control_request_fields(&u.data.via.map, req);
		break;
	case MSGPACK_UNPACK_NOMEM_ERROR:
		/* also what msgpack-c says of nesting deeper than it supports */
		err = "request too deeply nested, or out of memory";
		break;
	default:
		err = "not a msgpack object";
		break;
	}
	msgpack_unpacked_destroy(&u);
	return err;
}

/* ---- replies ---- */

static int control_buf_write(void *data, const char *buf, size_t len)
{
	struct control_buf *b = data;

	if (b->failed || msgpack_sbuffer_write(&b->sb, buf, len) < 0) {
		b->failed = 1;
		return -1;
	}
	return 0;
}

static void control_buf_init(struct control_buf *b)
{
	msgpack_sbuffer_init(&b->sb);
	msgpack_packer_init(&b->pk, b, control_buf_write);
	b->failed = 0;
}

static void control_buf_reset(struct control_buf *b)
{
	if (b->sb.alloc > CONTROL_BUF_KEEP) {
		msgpack_sbuffer_destroy(&b->sb);
		msgpack_sbuffer_init(&b->sb);
	}
	msgpack_sbuffer_clear(&b->sb);
	b->failed = 0;
}

static void control_pack_str(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);

	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

static void control_pack_str_or_nil(msgpack_packer *pk, const char *s)
{
	if (s)
		control_pack_str(pk, s);
	else
		msgpack_pack_nil(pk);
}

static void control_pack_int(msgpack_packer *pk, const char *key, int64_t v)
{
	control_pack_str(pk, key);
	msgpack_pack_int64(pk, v);
}

static void control_pack_uint(msgpack_packer *pk, const char *key, uint64_t v)
{
	control_pack_str(pk, key);
	msgpack_pack_uint64(pk, v);
}

/* Starts a reply map of n entries after "ok": true. */
static void control_pack_ok(msgpack_packer *pk, size_t n)
{
	msgpack_pack_map(pk, n + 1);
	control_pack_str(pk, "ok");
	msgpack_pack_true(pk);
}

static void control_pack_status(struct control *c, msgpack_packer *pk)
{
	struct statsnap s;

	statsnap_take(&s, &stats, c->live);
	control_pack_ok(pk, 8);
	control_pack_str(pk, "counters");
	msgpack_pack_map(pk, 11);
	control_pack_uint(pk, "received", s.acct.received);
	control_pack_uint(pk, "written", s.acct.written);
	control_pack_uint(pk, "dropped", s.acct.dropped);
	control_pack_uint(pk, "duplicates", s.acct.duplicates);
	control_pack_uint(pk, "timed_out", s.acct.timed_out);
	control_pack_uint(pk, "unpriced", s.acct.unpriced);
	control_pack_uint(pk, "unauthenticated", s.acct.unauthenticated);
	control_pack_uint(pk, "pending_overflow", s.acct.pending_overflow);
	control_pack_uint(pk, "records_tcp", s.records_tcp);
	control_pack_uint(pk, "records_udp", s.records_udp);
	control_pack_uint(pk, "batches", s.batches);
	control_pack_uint(pk, "queue_depth", s.queue_depth);
	control_pack_uint(pk, "queue_capacity", s.queue_capacity);
	control_pack_uint(pk, "inflight", s.inflight);
	control_pack_int(pk, "spop_connections_open", s.spop_connections_open);
	control_pack_uint(pk, "uptime_s", (stats_now_ns() - c->started_ns) / 1000000000u);
	control_pack_int(pk, "pid", getpid());
	control_pack_str(pk, "version");
	control_pack_str(pk, CONTROL_VERSION);
}

static void control_on_key(void *arg, const struct live_key *k)
{
	struct control *c = arg;
	msgpack_packer *pk = &c->items.pk;

	msgpack_pack_map(pk, 7);
	control_pack_int(pk, "key_id", k->key_id);
	control_pack_int(pk, "inflight", k->inflight);
	control_pack_int(pk, "requests", k->requests);
	control_pack_int(pk, "errors", k->errors);
	control_pack_int(pk, "prompt_tokens", k->prompt_tokens);
	control_pack_int(pk, "completion_tokens", k->completion_tokens);
	control_pack_int(pk, "cost_micros", k->cost_micros);
	c->nitems++;
}

static void control_on_txn(void *arg, const struct live_txn *t)
{
	struct control *c = arg;
	msgpack_packer *pk = &c->items.pk;

	msgpack_pack_map(pk, 5);
	control_pack_str(pk, "request_id");
	control_pack_str_or_nil(pk, t->request_id);
	control_pack_str(pk, "key_id");
	if (t->key_id < 0)
		msgpack_pack_nil(pk);
	else
		msgpack_pack_int64(pk, t->key_id);
	control_pack_str(pk, "model");
	control_pack_str_or_nil(pk, t->model);
	control_pack_str(pk, "stream");
	if (t->stream < 0)
		msgpack_pack_nil(pk);
	else if (t->stream)
		msgpack_pack_true(pk);
	else
		msgpack_pack_false(pk);
	control_pack_int(pk, "age_ms", t->age_ms);
	c->nitems++;
}

/* Packs {"ok": true, name: [items]} once the items are in c->items. */
static void control_pack_items(struct control *c, msgpack_packer *pk, const char *name)
{
	control_pack_ok(pk, 1);
	control_pack_str(pk, name);
	msgpack_pack_array(pk, c->nitems);
	if (c->items.failed)
		c->reply.failed = 1;
	else if (c->items.sb.size)
		control_buf_write(&c->reply, c->items.sb.data, c->items.sb.size);
}

static void control_pack_reply(struct control *c, const struct control_request *req)
{
	msgpack_packer *pk = &c->reply.pk;
	const struct live_view *live = c->live;

	c->nitems = 0;
	switch (req->cmd) {
	case CONTROL_STATUS:
		control_pack_status(c, pk);
		break;
	case CONTROL_KEYS:
		live->keys(live->arg, control_on_key, c);
		control_pack_items(c, pk, "keys");
		break;
	case CONTROL_INFLIGHT:
		live->txns(live->arg, req->max, control_on_txn, c);
		control_pack_items(c, pk, "requests");
		break;
	}
}

static void control_pack_error(msgpack_packer *pk, const char *msg)
{
	msgpack_pack_map(pk, 2);
	control_pack_str(pk, "ok");
	msgpack_pack_false(pk);
	control_pack_str(pk, "error");
	control_pack_str(pk, msg);
}

/* Frames c->reply onto the connection. 0, or -1 out of memory. */
static int control_send(struct control *c, struct adminsrv_conn *conn)
{
	size_t n = c->reply.sb.size;
	unsigned char len[4] = { (unsigned char)(n >> 24), (unsigned char)(n >> 16),
	                         (unsigned char)(n >> 8), (unsigned char)n };

	if (c->reply.failed)
		return -1;
	return adminsrv_write(conn, len, 4) < 0 || adminsrv_write(conn, c->reply.sb.data, n) < 0
	       ? -1 : 0;
}

/* Sends the reply to req, or the error msg when req is NULL. An error reply that
 * cannot be built either closes the connection. 0 or -1. */
static int control_answer(struct control *c, struct adminsrv_conn *conn,
                          const struct control_request *req, const char *msg)
{
	int rc;

	if (req)
		control_pack_reply(c, req);
	else
		control_pack_error(&c->reply.pk, msg);
	if (c->reply.failed) {
		log_error("control: out of memory for a reply");
		control_buf_reset(&c->reply);
		control_pack_error(&c->reply.pk, "out of memory");
	}
	rc = control_send(c, conn);
	/* Empty between replies; large ones are freed. */
	control_buf_reset(&c->reply);
	control_buf_reset(&c->items);
	return rc;
}

static ssize_t control_input(void *arg, struct adminsrv_conn *conn, void *state,
                             const unsigned char *in, size_t len)
{
	struct control *c = arg;
	struct control_request req;
	const char *msg;
	char toobig[80];
	size_t n;

	(void)state;
	switch (control_frame_parse(in, len, &n)) {
	case CONTROL_FRAME_PARTIAL:
		return 0;
	case CONTROL_FRAME_TOO_LARGE:
		snprintf(toobig, sizeof(toobig), "frame of %zu bytes is over the %d-byte limit", n,
		         CONTROL_FRAME_MAX);
		control_answer(c, conn, NULL, toobig);
		return -1;
	case CONTROL_FRAME_WHOLE:
		break;
	}
	msg = control_request_decode(in + 4, n, &req);
	if (control_answer(c, conn, msg ? NULL : &req, msg) < 0)
		return -1;
	return (ssize_t)(4 + n);
}

static const struct adminsrv_proto control_proto = {
	.name = "control",
	.in_max = 4 + CONTROL_FRAME_MAX,
	.input = control_input,
};

struct control *control_start(struct ev_loop *loop, const char *path,
                              const struct live_view *live, char *err, size_t errlen)
{
	static const struct adminsrv_limits limits = {
		.max_conns = CONTROL_MAX_CONNS,
		.timeout = CONTROL_TIMEOUT,
	};
	struct control *c = calloc(1, sizeof(*c));
	struct stat st;
	int fd = -1;

	if (!c || !(c->path = strdup(path))) {
		snprintf(err, errlen, "control: out of memory");
		goto fail;
	}
	if ((fd = net_listen_unix(path, 0600, err, errlen)) < 0)
		goto fail;
	if (lstat(path, &st) < 0) {
		snprintf(err, errlen, "control: %s vanished", path);
		goto fail;
	}
	c->dev = st.st_dev;
	c->ino = st.st_ino;
	c->live = live;
	c->started_ns = stats_now_ns();
	control_buf_init(&c->reply);
	control_buf_init(&c->items);
	if (!(c->srv = adminsrv_start(loop, fd, &control_proto, c, &limits))) {
		snprintf(err, errlen, "control: out of memory");
		unlink(path);
		goto fail;
	}
	log_info("control: listening on %s", path);
	return c;
fail:
	if (fd >= 0)
		close(fd);
	if (c)
		free(c->path);
	free(c);
	return NULL;
}

void control_stop(struct control *c)
{
	struct stat st;

	adminsrv_stop(c->srv);
	/* After a reload the new agent may own the path already: leave its socket alone. */
	if (lstat(c->path, &st) == 0 && st.st_dev == c->dev && st.st_ino == c->ino)
		unlink(c->path);
	msgpack_sbuffer_destroy(&c->reply.sb);
	msgpack_sbuffer_destroy(&c->items.sb);
	free(c->path);
	free(c);
}
