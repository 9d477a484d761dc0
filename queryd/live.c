/* live: the control-socket client (see live.h). Runs on the calling request thread:
 * a non-blocking socket and poll() against one deadline for connect, send and reply. */
#include "live.h"

#include <errno.h>
#include <math.h>
#include <msgpack.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "json.h"
#include "mpcheck.h"

/* {"cmd": "status"} framed: length 12, then fixmap(1) fixstr(3) "cmd" fixstr(6) "status". */
static const unsigned char live_request[] = {
	0, 0, 0, 12, 0x81, 0xa3, 'c', 'm', 'd', 0xa6, 's', 't', 'a', 't', 'u', 's',
};

static cJSON *live_object(const msgpack_object *o, char *err, size_t errlen);

static int live_str_is(const msgpack_object *o, const char *s)
{
	return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
	       memcmp(o->via.str.ptr, s, o->via.str.size) == 0;
}

/* The entries of a map, but skip (the "ok" key, or none), into a new JSON object. */
static cJSON *live_map(const msgpack_object_map *m, const char *skip, char *err, size_t errlen)
{
	cJSON *obj = cJSON_CreateObject();
	uint32_t i;

	if (!obj)
		goto nomem;
	for (i = 0; i < m->size; i++) {
		const msgpack_object *k = &m->ptr[i].key;
		cJSON *v;
		char *name;

		if (k->type != MSGPACK_OBJECT_STR) {
			snprintf(err, errlen, "a map key is not a string");
			goto fail;
		}
		if (skip && live_str_is(k, skip))
			continue;
		v = live_object(&m->ptr[i].val, err, errlen);
		if (!v)
			goto fail;
		name = json_utf8_dup(k->via.str.ptr, k->via.str.size);
		if (!name || !cJSON_AddItemToObject(obj, name, v)) {
			free(name);
			cJSON_Delete(v);
			goto nomem;
		}
		free(name);
	}
	return obj;
nomem:
	snprintf(err, errlen, "out of memory");
fail:
	cJSON_Delete(obj);
	return NULL;
}

static cJSON *live_array(const msgpack_object_array *a, char *err, size_t errlen)
{
	cJSON *arr = cJSON_CreateArray(), *v;
	uint32_t i;

	if (!arr) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	for (i = 0; i < a->size; i++) {
		v = live_object(&a->ptr[i], err, errlen);
		if (!v || !cJSON_AddItemToArray(arr, v)) {
			if (v) {
				cJSON_Delete(v);
				snprintf(err, errlen, "out of memory");
			}
			cJSON_Delete(arr);
			return NULL;
		}
	}
	return arr;
}

/* Recursion is bounded by msgpack-c's nesting limit (MSGPACK_EMBED_STACK_SIZE). */
static cJSON *live_object(const msgpack_object *o, char *err, size_t errlen)
{
	cJSON *v;

	switch (o->type) {
	case MSGPACK_OBJECT_NIL:
		v = cJSON_CreateNull();
		break;
	case MSGPACK_OBJECT_BOOLEAN:
		v = cJSON_CreateBool(o->via.boolean);
		break;
	case MSGPACK_OBJECT_POSITIVE_INTEGER:
		v = json_uint(o->via.u64);
		break;
	case MSGPACK_OBJECT_NEGATIVE_INTEGER:
		v = json_int(o->via.i64);
		break;
	case MSGPACK_OBJECT_FLOAT32:
	case MSGPACK_OBJECT_FLOAT64:
		v = isfinite(o->via.f64) ? cJSON_CreateNumber(o->via.f64) : cJSON_CreateNull();
		break;
	case MSGPACK_OBJECT_STR:
		v = json_string(o->via.str.ptr, o->via.str.size);
		break;
	case MSGPACK_OBJECT_ARRAY:
		return live_array(&o->via.array, err, errlen);
	case MSGPACK_OBJECT_MAP:
		return live_map(&o->via.map, NULL, err, errlen);
	default:
		snprintf(err, errlen, "binary or extension value in the reply");
		return NULL;
	}
	if (!v)
		snprintf(err, errlen, "out of memory");
	return v;
}

/* The "ok" and "error" entries of a reply map. */
static int live_reply_ok(const msgpack_object_map *m, char *err, size_t errlen)
{
	const msgpack_object *ok = NULL, *msg = NULL;
	uint32_t i;

	for (i = 0; i < m->size; i++) {
		if (live_str_is(&m->ptr[i].key, "ok"))
			ok = &m->ptr[i].val;
		else if (live_str_is(&m->ptr[i].key, "error"))
			msg = &m->ptr[i].val;
	}
	if (ok && ok->type == MSGPACK_OBJECT_BOOLEAN && ok->via.boolean)
		return 0;
	if (msg && msg->type == MSGPACK_OBJECT_STR) {
		char *text = json_utf8_dup(msg->via.str.ptr, msg->via.str.size > 200 ? 200
		                                                                    : msg->via.str.size);

		snprintf(err, errlen, "the agent answered an error: %s", text ? text : "?");
		free(text);
	} else {
		snprintf(err, errlen, "the agent's reply has no \"ok\": true");
	}
	return -1;
}

cJSON *live_reply_decode(const unsigned char *data, size_t len, char *err, size_t errlen)
{
	msgpack_unpacked u;
	cJSON *out = NULL;
	size_t off = 0;

	if (mpcheck_bounded(data, data + len) < 0) {
		snprintf(err, errlen, "the agent's reply is not one msgpack object");
		return NULL;
	}
	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, (const char *)data, len, &off) != MSGPACK_UNPACK_SUCCESS ||
	    off != len)
		snprintf(err, errlen, "the agent's reply is not one msgpack object");
	else if (u.data.type != MSGPACK_OBJECT_MAP)
		snprintf(err, errlen, "the agent's reply is not a map");
	else if (live_reply_ok(&u.data.via.map, err, errlen) == 0)
		out = live_map(&u.data.via.map, "ok", err, errlen);
	msgpack_unpacked_destroy(&u);
	return out;
}

static int64_t live_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for events on fd until the deadline. 0 when ready, -1 on timeout or error. */
static int live_wait(int fd, short events, int64_t deadline)
{
	struct pollfd pfd = { .fd = fd, .events = events };
	int64_t left;
	int n;

	for (;;) {
		left = deadline - live_now_ms();
		if (left <= 0)
			return -1;
		n = poll(&pfd, 1, (int)left);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -1;
	}
}

/* Reads exactly len bytes before the deadline. 0, or -1 with errno (ETIMEDOUT on
 * timeout, ECONNRESET when the agent closed first). */
static int live_read(int fd, unsigned char *buf, size_t len, int64_t deadline)
{
	size_t got = 0;
	ssize_t n;

	while (got < len) {
		n = recv(fd, buf + got, len - got, 0);
		if (n > 0) {
			got += (size_t)n;
		} else if (n == 0) {
			errno = ECONNRESET;
			return -1;
		} else if (errno == EAGAIN || errno == EWOULDBLOCK) {
			if (live_wait(fd, POLLIN, deadline) < 0) {
				errno = ETIMEDOUT;
				return -1;
			}
		} else if (errno != EINTR) {
			return -1;
		}
	}
	return 0;
}

static int live_send(int fd, const unsigned char *buf, size_t len, int64_t deadline)
{
	size_t sent = 0;
	ssize_t n;

	while (sent < len) {
		n = send(fd, buf + sent, len - sent, MSG_NOSIGNAL);
		if (n >= 0) {
			sent += (size_t)n;
		} else if (errno == EAGAIN || errno == EWOULDBLOCK) {
			if (live_wait(fd, POLLOUT, deadline) < 0) {
				errno = ETIMEDOUT;
				return -1;
			}
		} else if (errno != EINTR) {
			return -1;
		}
	}
	return 0;
}

cJSON *live_status(const char *path, int timeout_ms, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int64_t deadline = live_now_ms() + timeout_ms;
	unsigned char head[4], *payload = NULL;
	cJSON *out = NULL;
	uint32_t n;
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "control socket path too long");
		return NULL;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(err, errlen, "socket: %s", strerror(errno));
		return NULL;
	}
	/* A unix connect completes at once or fails (EAGAIN: the agent's backlog is full). */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		snprintf(err, errlen, "cannot connect to %s: %s", path, strerror(errno));
		goto out;
	}
	if (live_send(fd, live_request, sizeof(live_request), deadline) < 0 ||
	    live_read(fd, head, sizeof(head), deadline) < 0) {
		snprintf(err, errlen, "no reply from %s: %s", path, strerror(errno));
		goto out;
	}
	n = (uint32_t)head[0] << 24 | (uint32_t)head[1] << 16 | (uint32_t)head[2] << 8 | head[3];
	if (n > LIVE_REPLY_MAX) {
		snprintf(err, errlen, "the agent's reply is too long (%u bytes)", n);
		goto out;
	}
	payload = malloc(n ? n : 1);
	if (!payload) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	if (live_read(fd, payload, n, deadline) < 0) {
		snprintf(err, errlen, "no whole reply from %s: %s", path, strerror(errno));
		goto out;
	}
	out = live_reply_decode(payload, n, err, errlen);
out:
	free(payload);
	close(fd);
	return out;
}
