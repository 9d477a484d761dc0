/* Unit tests of control: the frame and request decoders on bytes built here (hostile
 * ones included), then each command over the socket on a loop thread. */
#include <fcntl.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "control.h"
#include "counters.h"
#include "fakelive.h"
#include "loopthread.h"
#include "stats.h"
#include "tmpdir.h"
#include "unit.h"

/* ---- building requests ---- */

static void pack_str(msgpack_packer *pk, const char *s)
{
	msgpack_pack_str(pk, strlen(s));
	msgpack_pack_str_body(pk, s, strlen(s));
}

/* {"cmd": cmd} plus "max": max when max >= 0, into sb (cleared first). */
static void request(msgpack_sbuffer *sb, const char *cmd, int64_t max)
{
	msgpack_packer pk;

	msgpack_sbuffer_clear(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_map(&pk, max >= 0 ? 2 : 1);
	pack_str(&pk, "cmd");
	pack_str(&pk, cmd);
	if (max >= 0) {
		pack_str(&pk, "max");
		msgpack_pack_int64(&pk, max);
	}
}

static const char *decode(const void *p, size_t n, struct control_request *req)
{
	return control_request_decode(p, n, req);
}

/* ---- decoders ---- */

static void test_frame_parse(void)
{
	unsigned char b[8] = { 0, 0, 0, 3, 'a', 'b', 'c', 'd' };
	size_t n = 0;

	CHECK_EQ_INT(control_frame_parse(b, 0, &n), CONTROL_FRAME_PARTIAL);
	CHECK_EQ_INT(control_frame_parse(b, 3, &n), CONTROL_FRAME_PARTIAL);
	CHECK_EQ_INT(control_frame_parse(b, 6, &n), CONTROL_FRAME_PARTIAL);
	CHECK_EQ_INT(control_frame_parse(b, 7, &n), CONTROL_FRAME_WHOLE);
	CHECK_EQ_INT(n, 3);
	CHECK_EQ_INT(control_frame_parse(b, 8, &n), CONTROL_FRAME_WHOLE);
	b[1] = 1;            /* 65539 */
	CHECK_EQ_INT(control_frame_parse(b, 8, &n), CONTROL_FRAME_TOO_LARGE);
	CHECK_EQ_INT(n, 65539);
	b[1] = 1, b[3] = 0;  /* 65536: the limit itself is fine */
	CHECK_EQ_INT(control_frame_parse(b, 8, &n), CONTROL_FRAME_PARTIAL);
	b[0] = 0xff;
	CHECK_EQ_INT(control_frame_parse(b, 4, &n), CONTROL_FRAME_TOO_LARGE);
}

static void test_decode_commands(void)
{
	struct control_request req;
	msgpack_sbuffer sb;

	msgpack_sbuffer_init(&sb);
	request(&sb, "status", -1);
	CHECK(decode(sb.data, sb.size, &req) == NULL);
	CHECK_EQ_INT(req.cmd, CONTROL_STATUS);
	request(&sb, "keys", -1);
	CHECK(decode(sb.data, sb.size, &req) == NULL);
	CHECK_EQ_INT(req.cmd, CONTROL_KEYS);
	request(&sb, "inflight", -1);
	CHECK(decode(sb.data, sb.size, &req) == NULL);
	CHECK_EQ_INT(req.cmd, CONTROL_INFLIGHT);
	CHECK_EQ_INT(req.max, CONTROL_INFLIGHT_DEFAULT);
	request(&sb, "inflight", 5);
	CHECK(decode(sb.data, sb.size, &req) == NULL);
	CHECK_EQ_INT(req.max, 5);
	request(&sb, "inflight", 0);
	CHECK(decode(sb.data, sb.size, &req) == NULL);
	CHECK_EQ_INT(req.max, 0);
	request(&sb, "inflight", 1000000);
	CHECK(decode(sb.data, sb.size, &req) == NULL);
	CHECK_EQ_INT(req.max, CONTROL_INFLIGHT_CAP);
	msgpack_sbuffer_destroy(&sb);
}

/* Unknown keys are ignored; a non-string key is just another unknown key. */
static void test_decode_extra_keys(void)
{
	/* {1: nil, "x": [1, 2], "cmd": "keys"} */
	static const unsigned char b[] = { 0x83, 0x01, 0xc0, 0xa1, 'x', 0x92, 0x01, 0x02,
	                                   0xa3, 'c', 'm', 'd', 0xa4, 'k', 'e', 'y', 's' };
	struct control_request req;

	CHECK(decode(b, sizeof(b), &req) == NULL);
	CHECK_EQ_INT(req.cmd, CONTROL_KEYS);
}

static void check_error(const void *b, size_t n, const char *expected)
{
	struct control_request req;
	const char *err = decode(b, n, &req);

	CHECK(err != NULL);
	if (err && !strstr(err, expected))
		fprintf(stderr, "error \"%s\" lacks \"%s\"\n", err, expected);
	CHECK(err && strstr(err, expected));
}

#define CHECK_ERROR(lit, expected) check_error(lit, sizeof(lit) - 1, expected)

static void test_decode_errors(void)
{
	msgpack_sbuffer sb;

	CHECK_ERROR("", "not a msgpack object");
	CHECK_ERROR("\xc1", "not a msgpack object");
	CHECK_ERROR("\x92\x01\x02", "not a map");
	CHECK_ERROR("\xa6status", "not a map");
	CHECK_ERROR("\x80", "no cmd");
	CHECK_ERROR("\x81\xa3" "cmd" "\x01", "unknown cmd");
	CHECK_ERROR("\x81\xa3" "cmd" "\xa4stat", "unknown cmd");
	CHECK_ERROR("\x81\xa3" "cmd" "\xc4\x06status", "unknown cmd");   /* bin, not str */
	CHECK_ERROR("\x82\xa3" "cmd" "\xa4keys\xa3max\xff", "max must be");
	CHECK_ERROR("\x82\xa3" "cmd" "\xa4keys\xa3max\xa1" "1", "max must be");
	CHECK_ERROR("\x82\xa3" "cmd" "\xa4keys\xa3max\xcb\x3f\xf0\0\0\0\0\0\0", "max must be");
	msgpack_sbuffer_init(&sb);
	request(&sb, "status", -1);
	check_error(sb.data, sb.size - 1, "not a msgpack object");       /* truncated */
	msgpack_sbuffer_write(&sb, "\xc0", 1);
	check_error(sb.data, sb.size, "bytes after");
	msgpack_sbuffer_destroy(&sb);
}

/* Containers that declare more elements than there are bytes are refused before
 * msgpack-c allocates for them (in an ASan build, `make asan`, an allocation that
 * large aborts the test); deep nesting is refused too. */
static void test_decode_hostile(void)
{
	static unsigned char deep[1000];

	CHECK_ERROR("\xdf\xff\xff\xff\xff", "not a msgpack object");
	CHECK_ERROR("\xdd\x0f\xff\xff\xff\x01", "not a msgpack object");
	CHECK_ERROR("\x81\xa3" "cmd" "\xdc\xff\xff", "not a msgpack object");
	CHECK_ERROR("\xdb\xff\xff\xff\xff", "not a msgpack object");
	CHECK_ERROR("\xc9\x00\x00\x00\x02\x01", "not a msgpack object");
	memset(deep, 0x91, sizeof(deep));
	deep[sizeof(deep) - 1] = 0xc0;
	check_error(deep, sizeof(deep), "nested");
}

/* ---- over the socket ---- */

static struct loopthread lt;
static struct control *ctl;
static const char *sock_path;

static int send_frame(int fd, const void *p, size_t n)
{
	unsigned char len[4] = { (unsigned char)(n >> 24), (unsigned char)(n >> 16),
	                         (unsigned char)(n >> 8), (unsigned char)n };

	return client_send(fd, len, 4) < 0 || client_send(fd, p, n) < 0 ? -1 : 0;
}

static int send_request(int fd, const char *cmd, int64_t max)
{
	msgpack_sbuffer sb;
	int rc;

	msgpack_sbuffer_init(&sb);
	request(&sb, cmd, max);
	rc = send_frame(fd, sb.data, sb.size);
	msgpack_sbuffer_destroy(&sb);
	return rc;
}

/* One reply frame and its unpacked form, whose strings point into body. */
struct reply {
	msgpack_unpacked u;
	char *body;
};

/* Reads one reply frame into r (a map, or -1); reply_free it in either case. */
static int read_reply(int fd, struct reply *r)
{
	unsigned char len[4];
	size_t n, off = 0;

	msgpack_unpacked_init(&r->u);
	r->body = NULL;
	if (client_recv(fd, len, 4) < 0)
		return -1;
	n = (size_t)len[0] << 24 | (size_t)len[1] << 16 | (size_t)len[2] << 8 | len[3];
	if (!(r->body = malloc(n ? n : 1)) || client_recv(fd, r->body, n) < 0)
		return -1;
	return msgpack_unpack_next(&r->u, r->body, n, &off) == MSGPACK_UNPACK_SUCCESS && off == n &&
	       r->u.data.type == MSGPACK_OBJECT_MAP ? 0 : -1;
}

static void reply_free(struct reply *r)
{
	msgpack_unpacked_destroy(&r->u);
	free(r->body);
}

static const msgpack_object *get(const msgpack_object *map, const char *key)
{
	uint32_t i;

	if (!map || map->type != MSGPACK_OBJECT_MAP)
		return NULL;
	for (i = 0; i < map->via.map.size; i++) {
		const msgpack_object *k = &map->via.map.ptr[i].key;

		if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == strlen(key) &&
		    memcmp(k->via.str.ptr, key, k->via.str.size) == 0)
			return &map->via.map.ptr[i].val;
	}
	return NULL;
}

static long long get_int(const msgpack_object *map, const char *key)
{
	const msgpack_object *v = get(map, key);

	if (v && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
		return (long long)v->via.u64;
	if (v && v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
		return (long long)v->via.i64;
	return -999999;
}

static int is_str(const msgpack_object *v, const char *s)
{
	return v && v->type == MSGPACK_OBJECT_STR && v->via.str.size == strlen(s) &&
	       memcmp(v->via.str.ptr, s, v->via.str.size) == 0;
}

static int is_ok(const msgpack_object *reply, int ok)
{
	const msgpack_object *v = get(reply, "ok");

	return v && v->type == MSGPACK_OBJECT_BOOLEAN && v->via.boolean == (ok != 0);
}

static void check_error_reply(int fd, const char *expected)
{
	struct reply r;
	const msgpack_object *e;

	CHECK_EQ_INT(read_reply(fd, &r), 0);
	CHECK(is_ok(&r.u.data, 0));
	e = get(&r.u.data, "error");
	CHECK(e && e->type == MSGPACK_OBJECT_STR &&
	      memmem(e->via.str.ptr, e->via.str.size, expected, strlen(expected)));
	reply_free(&r);
}

static void test_socket_mode(void)
{
	struct stat st;

	CHECK_EQ_INT(lstat(sock_path, &st), 0);
	CHECK(S_ISSOCK(st.st_mode));
	CHECK_EQ_INT(st.st_mode & 0777, 0600);
}

static void test_status(void)
{
	const msgpack_object *counters;
	struct reply r;
	int fd = client_unix(sock_path);

	counters_set(&(struct counters){ .received = 41, .written = 40 });
	stats_add(&stats.records_udp, 2);
	stats_add(&stats.batches, 3);
	atomic_store(&stats.spop_connections_open, 5);
	CHECK_EQ_INT(send_request(fd, "status", -1), 0);
	CHECK_EQ_INT(read_reply(fd, &r), 0);
	CHECK(is_ok(&r.u.data, 1));
	counters = get(&r.u.data, "counters");
	CHECK_EQ_INT(get_int(counters, "received"), 41);
	CHECK_EQ_INT(get_int(counters, "written"), 40);
	CHECK_EQ_INT(get_int(counters, "dropped"), 0);
	CHECK_EQ_INT(get_int(counters, "records_udp"), 2);
	CHECK_EQ_INT(get_int(counters, "batches"), 3);
	CHECK(get(counters, "duplicates") && get(counters, "timed_out") && get(counters, "unpriced") &&
	      get(counters, "records_tcp"));
	CHECK_EQ_INT(get_int(&r.u.data, "queue_depth"), FAKELIVE_DEPTH);
	CHECK_EQ_INT(get_int(&r.u.data, "queue_capacity"), FAKELIVE_CAPACITY);
	CHECK_EQ_INT(get_int(&r.u.data, "inflight"), FAKELIVE_INFLIGHT);
	CHECK_EQ_INT(get_int(&r.u.data, "spop_connections_open"), 5);
	CHECK_EQ_INT(get_int(&r.u.data, "pid"), getpid());
	CHECK(get_int(&r.u.data, "uptime_s") >= 0 && get_int(&r.u.data, "uptime_s") < 60);
	CHECK(is_str(get(&r.u.data, "version"), CONTROL_VERSION));
	reply_free(&r);
	close(fd);
}

static void test_keys(void)
{
	const msgpack_object *keys, *k;
	struct reply r;
	int fd = client_unix(sock_path);

	CHECK_EQ_INT(send_request(fd, "keys", -1), 0);
	CHECK_EQ_INT(read_reply(fd, &r), 0);
	CHECK(is_ok(&r.u.data, 1));
	keys = get(&r.u.data, "keys");
	CHECK(keys && keys->type == MSGPACK_OBJECT_ARRAY && keys->via.array.size == 2);
	if (keys && keys->type == MSGPACK_OBJECT_ARRAY && keys->via.array.size == 2) {
		k = &keys->via.array.ptr[0];
		CHECK_EQ_INT(get_int(k, "key_id"), 1);
		CHECK_EQ_INT(get_int(k, "inflight"), 2);
		CHECK_EQ_INT(get_int(k, "requests"), 30);
		CHECK_EQ_INT(get_int(k, "errors"), 4);
		CHECK_EQ_INT(get_int(k, "prompt_tokens"), 500);
		CHECK_EQ_INT(get_int(k, "completion_tokens"), 600);
		CHECK_EQ_INT(get_int(k, "cost_micros"), 7000);
		CHECK_EQ_INT(get_int(&keys->via.array.ptr[1], "key_id"), 9);
		CHECK_EQ_INT(get_int(&keys->via.array.ptr[1], "cost_micros"), -1);
	}
	reply_free(&r);
	close(fd);
}

static void test_inflight(void)
{
	const msgpack_object *reqs, *t;
	struct reply r;
	int fd = client_unix(sock_path);

	atomic_store(&fakelive_ntxns, 5);
	CHECK_EQ_INT(send_request(fd, "inflight", 4), 0);
	CHECK_EQ_INT(read_reply(fd, &r), 0);
	CHECK(is_ok(&r.u.data, 1));
	reqs = get(&r.u.data, "requests");
	CHECK(reqs && reqs->type == MSGPACK_OBJECT_ARRAY && reqs->via.array.size == 4);
	if (reqs && reqs->type == MSGPACK_OBJECT_ARRAY && reqs->via.array.size == 4) {
		t = &reqs->via.array.ptr[0];      /* no key, stream unknown */
		CHECK(is_str(get(t, "request_id"), "req-0"));
		CHECK(get(t, "key_id") && get(t, "key_id")->type == MSGPACK_OBJECT_NIL);
		CHECK(is_str(get(t, "model"), "m-0"));
		CHECK(get(t, "stream") && get(t, "stream")->type == MSGPACK_OBJECT_NIL);
		CHECK_EQ_INT(get_int(t, "age_ms"), 0);
		t = &reqs->via.array.ptr[2];
		CHECK_EQ_INT(get_int(t, "key_id"), 2);
		CHECK(get(t, "stream") && get(t, "stream")->type == MSGPACK_OBJECT_BOOLEAN &&
		      get(t, "stream")->via.boolean);
		CHECK_EQ_INT(get_int(t, "age_ms"), 20);
		t = &reqs->via.array.ptr[3];      /* no model */
		CHECK(get(t, "model") && get(t, "model")->type == MSGPACK_OBJECT_NIL);
		CHECK(get(t, "stream") && get(t, "stream")->type == MSGPACK_OBJECT_NIL);
		t = &reqs->via.array.ptr[1];
		CHECK(get(t, "stream") && get(t, "stream")->type == MSGPACK_OBJECT_BOOLEAN &&
		      !get(t, "stream")->via.boolean);
	}
	reply_free(&r);
	close(fd);
}

/* A reply far over the request limit (10000 requests, about 600 KB) arrives whole. */
static void test_inflight_large(void)
{
	const msgpack_object *reqs;
	struct reply r;
	int fd = client_unix(sock_path);

	atomic_store(&fakelive_ntxns, 50000);
	CHECK_EQ_INT(send_request(fd, "inflight", 50000), 0);
	CHECK_EQ_INT(read_reply(fd, &r), 0);
	reqs = get(&r.u.data, "requests");
	CHECK(reqs && reqs->type == MSGPACK_OBJECT_ARRAY &&
	      reqs->via.array.size == CONTROL_INFLIGHT_CAP);
	if (reqs && reqs->type == MSGPACK_OBJECT_ARRAY && reqs->via.array.size == CONTROL_INFLIGHT_CAP)
		CHECK(is_str(get(&reqs->via.array.ptr[CONTROL_INFLIGHT_CAP - 1], "request_id"),
		             "req-9999"));
	reply_free(&r);
	/* and the default is 100 */
	CHECK_EQ_INT(send_request(fd, "inflight", -1), 0);
	CHECK_EQ_INT(read_reply(fd, &r), 0);
	reqs = get(&r.u.data, "requests");
	CHECK(reqs && reqs->type == MSGPACK_OBJECT_ARRAY && reqs->via.array.size == 100);
	reply_free(&r);
	atomic_store(&fakelive_ntxns, 3);
	close(fd);
}

/* Bad requests get an error reply and leave the connection usable. */
static void test_malformed_then_good(void)
{
	struct reply r;
	int fd = client_unix(sock_path);

	CHECK_EQ_INT(send_frame(fd, "\x93\x01\x02\x03", 4), 0);
	check_error_reply(fd, "not a map");
	CHECK_EQ_INT(send_frame(fd, "", 0), 0);
	check_error_reply(fd, "not a msgpack object");
	CHECK_EQ_INT(send_request(fd, "reboot", -1), 0);
	check_error_reply(fd, "unknown cmd");
	CHECK_EQ_INT(send_frame(fd, "\x81\xa3max\x01", 6), 0);
	check_error_reply(fd, "no cmd");
	CHECK_EQ_INT(send_request(fd, "status", -1), 0);
	CHECK_EQ_INT(read_reply(fd, &r), 0);
	CHECK(is_ok(&r.u.data, 1));
	reply_free(&r);
	close(fd);
}

/* Several requests in one write get their replies in order. */
static void test_pipelined(void)
{
	static const char *const cmds[] = { "keys", "status", "inflight", "keys" };
	struct reply r;
	int fd = client_unix(sock_path);
	size_t i;

	for (i = 0; i < 4; i++)
		CHECK_EQ_INT(send_request(fd, cmds[i], -1), 0);
	for (i = 0; i < 4; i++) {
			CHECK_EQ_INT(read_reply(fd, &r), 0);
		CHECK(is_ok(&r.u.data, 1));
		CHECK(get(&r.u.data, i == 1 ? "counters" : i == 2 ? "requests" : "keys") != NULL);
		reply_free(&r);
	}
	close(fd);
}

static void test_oversize_frame(void)
{
	static char junk[70000];
	int fd = client_unix(sock_path);

	CHECK_EQ_INT(send_frame(fd, junk, sizeof(junk)), 0);
	check_error_reply(fd, "over the 65536-byte limit");
	CHECK_EQ_INT(client_end(fd), CLIENT_EOF);
	close(fd);
	/* the header alone is enough */
	fd = client_unix(sock_path);
	CHECK_EQ_INT(client_send(fd, "\x7f\xff\xff\xff", 4), 0);
	check_error_reply(fd, "over the");
	CHECK_EQ_INT(client_end(fd), CLIENT_EOF);
	close(fd);
}

/* Leaves a socket file at path that nobody serves, as a killed agent would. */
static int make_stale_socket(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, rc;

	if (strlen(path) >= sizeof(sa.sun_path) || (fd = socket(AF_UNIX, SOCK_STREAM, 0)) < 0)
		return -1;
	memcpy(sa.sun_path, path, strlen(path));
	rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	return rc;
}

static void test_stale_and_foreign_files(void)
{
	const char *path = tmpdir_file("other.sock");
	char err[256] = "";
	struct control *c;
	int fd;

	/* a socket file nobody serves is replaced */
	CHECK_EQ_INT(make_stale_socket(path), 0);
	c = control_start(lt.loop, path, &fakelive, err, sizeof(err));
	CHECK(c != NULL);
	if (c)
		control_stop(c);
	CHECK(access(path, F_OK) < 0);
	/* a regular file is left alone */
	fd = open(path, O_CREAT | O_WRONLY, 0600);
	close(fd);
	CHECK(control_start(lt.loop, path, &fakelive, err, sizeof(err)) == NULL);
	CHECK(err[0] != '\0');
	CHECK(access(path, F_OK) == 0);
	unlink(path);
	/* a file that replaced ours while running is not removed at stop */
	c = control_start(lt.loop, path, &fakelive, err, sizeof(err));
	CHECK(c != NULL);
	unlink(path);
	fd = open(path, O_CREAT | O_WRONLY, 0600);
	close(fd);
	if (c)
		control_stop(c);
	CHECK(access(path, F_OK) == 0);
	unlink(path);
}

int main(void)
{
	char err[256];
	struct stat st;

	RUN(test_frame_parse);
	RUN(test_decode_commands);
	RUN(test_decode_extra_keys);
	RUN(test_decode_errors);
	RUN(test_decode_hostile);
	if (tmpdir_make("control") < 0 || loopthread_init(&lt) < 0)
		return 1;
	RUN(test_stale_and_foreign_files);
	sock_path = strdup(tmpdir_file("control.sock"));
	if (!(ctl = control_start(lt.loop, sock_path, &fakelive, err, sizeof(err))) ||
	    loopthread_run(&lt) < 0) {
		fprintf(stderr, "control_start: %s\n", err);
		return 1;
	}
	RUN(test_socket_mode);
	RUN(test_status);
	RUN(test_keys);
	RUN(test_inflight);
	RUN(test_inflight_large);
	RUN(test_malformed_then_good);
	RUN(test_pipelined);
	RUN(test_oversize_frame);
	loopthread_join(&lt);
	control_stop(ctl);
	CHECK(lstat(sock_path, &st) < 0);
	loopthread_destroy(&lt);
	free((void *)sock_path);
	tmpdir_remove();
	return UNIT_DONE();
}
