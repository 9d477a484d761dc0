/* Socket tests of main-loop modules: the module runs on an ev_loop in a thread of its
 * own while the test talks to it through blocking client sockets (with a receive
 * timeout, so that a missing reply fails a check instead of hanging). Start the module
 * on lt.loop before loopthread_run and stop it after loopthread_join. Header-only so
 * that each test binary stays one file. */
#ifndef TALLY_TEST_LOOPTHREAD_H
#define TALLY_TEST_LOOPTHREAD_H

#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

struct loopthread {
	struct ev_loop *loop;
	ev_async stop;
	pthread_t thread;
};

static void loopthread_on_stop(struct ev_loop *loop, ev_async *a, int revents)
{
	(void)a;
	(void)revents;
	ev_break(loop, EVBREAK_ALL);
}

static void *loopthread_main(void *arg)
{
	ev_run(((struct loopthread *)arg)->loop, 0);
	return NULL;
}

static inline int loopthread_init(struct loopthread *lt)
{
	if (!(lt->loop = ev_loop_new(EVFLAG_AUTO)))
		return -1;
	ev_async_init(&lt->stop, loopthread_on_stop);
	ev_async_start(lt->loop, &lt->stop);
	return 0;
}

static inline int loopthread_run(struct loopthread *lt)
{
	return pthread_create(&lt->thread, NULL, loopthread_main, lt) == 0 ? 0 : -1;
}

/* Ends the loop and waits for its thread; the loop then belongs to the caller again. */
static inline void loopthread_join(struct loopthread *lt)
{
	ev_async_send(lt->loop, &lt->stop);
	pthread_join(lt->thread, NULL);
}

static inline void loopthread_destroy(struct loopthread *lt)
{
	ev_async_stop(lt->loop, &lt->stop);
	ev_loop_destroy(lt->loop);
}

/* A TCP port free a moment ago on 127.0.0.1 (the listener sets SO_REUSEADDR). */
static inline int client_free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		port = ntohs(sa.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static inline int client_timeout(int fd)
{
	struct timeval tv = { .tv_sec = 5 };

	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static inline int client_tcp(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
	                          .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		perror("client_tcp");
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return client_timeout(fd);
}

static inline int client_unix(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		perror("client_unix");
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return client_timeout(fd);
}

static inline int client_send(int fd, const void *p, size_t n)
{
	const char *b = p;

	while (n > 0) {
		ssize_t k = send(fd, b, n, MSG_NOSIGNAL);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

static inline int client_send_str(int fd, const char *s)
{
	return client_send(fd, s, strlen(s));
}

/* Reads exactly n bytes: 0, or -1 on EOF, error or timeout. */
static inline int client_recv(int fd, void *p, size_t n)
{
	char *b = p;

	while (n > 0) {
		ssize_t k = recv(fd, b, n, 0);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

enum client_end { CLIENT_EOF, CLIENT_RESET, CLIENT_OPEN };

/* How the peer ended the connection, once what it sent was read: CLIENT_EOF for a
 * clean close, CLIENT_RESET for a reset (a close with our bytes unread), CLIENT_OPEN if
 * a byte came or the timeout passed. */
static inline enum client_end client_end(int fd)
{
	char c;
	ssize_t k;

	do
		k = recv(fd, &c, 1, 0);
	while (k < 0 && errno == EINTR);
	if (k == 0)
		return CLIENT_EOF;
	return k < 0 && errno == ECONNRESET ? CLIENT_RESET : CLIENT_OPEN;
}

#endif
