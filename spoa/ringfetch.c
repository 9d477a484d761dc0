/* ringfetch: a ring's events over HAProxy's CLI (see ringfetch.h). The calling thread. */
#include "ringfetch.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static int ringfetch_ring_ok(const char *ring)
{
	size_t i, n = strlen(ring);

	if (n == 0 || n > 64)
		return 0;
	for (i = 0; i < n; i++) {
		char c = ring[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return 0;
	}
	return 1;
}

size_t ringfetch_split(char *buf, size_t len, int *skipping, ringfetch_line_fn *cb, void *arg,
                       long *lines)
{
	size_t start = 0;
	char *nl;

	while ((nl = memchr(buf + start, '\n', len - start))) {
		size_t end = (size_t)(nl - buf);

		if (!*skipping && end > start) {
			cb(arg, buf + start, end - start);
			(*lines)++;
		}
		*skipping = 0;
		start = end + 1;
	}
	len -= start;
	if (len >= RINGFETCH_LINE_MAX) {
		*skipping = 1;     /* no newline within a line's room: drop it to its end */
		return 0;
	}
	memmove(buf, buf + start, len);
	return len;
}

static long ringfetch_now_ms(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

long ringfetch_events(const char *path, const char *ring, int timeout_ms, ringfetch_line_fn *cb,
                      void *arg, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	long deadline = ringfetch_now_ms() + timeout_ms;
	char cmd[96], *buf = NULL;
	size_t held = 0, sent = 0, cmdlen;
	long lines = 0, ret = -1;
	int fd = -1, skipping = 0;

	if (!ringfetch_ring_ok(ring) || strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "invalid ring name or socket path");
		return -1;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	cmdlen = (size_t)snprintf(cmd, sizeof(cmd), "show events %s\n", ring);
	if (!(buf = malloc(RINGFETCH_LINE_MAX))) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS)) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		if (fd >= 0 && (errno == ENOENT || errno == ECONNREFUSED))
			ret = RINGFETCH_ABSENT;
		goto out;
	}
	for (;;) {
		struct pollfd p = { fd, (short)(sent < cmdlen ? POLLOUT : POLLIN), 0 };
		long left = deadline - ringfetch_now_ms();
		ssize_t n;

		if (left <= 0) {
			snprintf(err, errlen, "%s: no complete answer within %d ms", path, timeout_ms);
			goto out;
		}
		if (poll(&p, 1, (int)left) < 0 && errno != EINTR) {
			snprintf(err, errlen, "%s: poll: %s", path, strerror(errno));
			goto out;
		}
		if (sent < cmdlen) {
			n = send(fd, cmd + sent, cmdlen - sent, MSG_NOSIGNAL);
			if (n < 0 && errno != EAGAIN && errno != EINTR) {
				snprintf(err, errlen, "%s: %s", path, strerror(errno));
				goto out;
			}
			sent += n > 0 ? (size_t)n : 0;
			continue;
		}
		n = read(fd, buf + held, RINGFETCH_LINE_MAX - held);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n < 0) {
			snprintf(err, errlen, "%s: %s", path, strerror(errno));
			goto out;
		}
		if (n == 0)
			break;
		held = ringfetch_split(buf, held + (size_t)n, &skipping, cb, arg, &lines);
	}
	/* The answer's last line may lack its newline. */
	if (held && !skipping) {
		cb(arg, buf, held);
		lines++;
	}
	ret = lines;
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	return ret;
}
