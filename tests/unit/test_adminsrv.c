/* Unit tests of adminsrv, the connection plumbing of metrics and control, with a line
 * protocol made here: each line is echoed; "close" is echoed then closes; "big"
 * answers BIG_REPLY bytes. Limits are small so that the tests stay fast. */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "adminsrv.h"
#include "loopthread.h"
#include "net.h"
#include "unit.h"

#define LINE_MAX_   64
#define BIG_REPLY   (2 * 1024 * 1024)
#define MAX_CONNS   2
#define TIMEOUT     0.3

static char big[BIG_REPLY];

struct line_state {
	int opened;
};

static void line_open(void *state)
{
	((struct line_state *)state)->opened = 1;
}

static ssize_t line_input(void *arg, struct adminsrv_conn *c, void *state,
                          const unsigned char *in, size_t len)
{
	const unsigned char *nl = memchr(in, '\n', len);
	size_t n;

	(void)arg;
	if (!((struct line_state *)state)->opened)
		return -1;
	if (!nl)
		return 0;
	n = (size_t)(nl - in) + 1;
	if (n == 4 && memcmp(in, "big\n", 4) == 0)
		return adminsrv_write(c, big, sizeof(big)) < 0 ? -1 : (ssize_t)n;
	if (adminsrv_write(c, in, n) < 0)
		return -1;
	return n == 6 && memcmp(in, "close\n", 6) == 0 ? -1 : (ssize_t)n;
}

static const struct adminsrv_proto line_proto = {
	.name = "line",
	.in_max = LINE_MAX_,
	.state_size = sizeof(struct line_state),
	.open = line_open,
	.input = line_input,
};

static struct loopthread lt;
static struct adminsrv *srv;
static int port;

static int start(void)
{
	static const struct adminsrv_limits limits = { .max_conns = MAX_CONNS, .timeout = TIMEOUT };
	char addr[32], err[256];
	int fd;

	port = client_free_port();
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	if (loopthread_init(&lt) < 0 || (fd = net_listen(addr, err, sizeof(err))) < 0 ||
	    !(srv = adminsrv_start(lt.loop, fd, &line_proto, NULL, &limits)) || loopthread_run(&lt) < 0) {
		fprintf(stderr, "start: %s\n", err);
		return -1;
	}
	return 0;
}

static void stop(void)
{
	loopthread_join(&lt);
	adminsrv_stop(srv);
	loopthread_destroy(&lt);
}

static int expect(int fd, const char *s)
{
	char buf[LINE_MAX_ + 1] = { 0 };
	size_t n = strlen(s);

	return client_recv(fd, buf, n) == 0 && memcmp(buf, s, n) == 0;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Lets the server notice that the previous tests' clients closed, freeing their slots. */
static void settle(void)
{
	struct timespec pause = { .tv_nsec = 50 * 1000 * 1000 };

	nanosleep(&pause, NULL);
}

static void test_pipelined_in_order(void)
{
	int fd = client_tcp(port);

	CHECK(fd >= 0);
	CHECK_EQ_INT(client_send_str(fd, "one\ntwo\nthr"), 0);
	CHECK(expect(fd, "one\ntwo\n"));
	CHECK_EQ_INT(client_send_str(fd, "ee\n"), 0);
	CHECK(expect(fd, "three\n"));
	close(fd);
}

static void test_close_after_reply(void)
{
	int fd = client_tcp(port);

	CHECK_EQ_INT(client_send_str(fd, "close\nlost\n"), 0);
	CHECK(expect(fd, "close\n"));
	CHECK_EQ_INT(client_end(fd), CLIENT_EOF);
	close(fd);
}

static void test_half_close_gets_replies(void)
{
	int fd = client_tcp(port);

	CHECK_EQ_INT(client_send_str(fd, "a\nb\n"), 0);
	shutdown(fd, SHUT_WR);
	CHECK(expect(fd, "a\nb\n"));
	CHECK_EQ_INT(client_end(fd), CLIENT_EOF);
	close(fd);
}

/* A reply far larger than the socket buffers, to a reader that starts late, arrives
 * whole; the connection then serves the next request. */
static void test_big_reply_slow_reader(void)
{
	static char got[BIG_REPLY];
	struct timespec pause = { .tv_nsec = 50 * 1000 * 1000 };
	int fd = client_tcp(port);

	CHECK_EQ_INT(client_send_str(fd, "big\nafter\n"), 0);
	nanosleep(&pause, NULL);
	CHECK_EQ_INT(client_recv(fd, got, sizeof(got)), 0);
	CHECK(memcmp(got, big, sizeof(big)) == 0);
	CHECK(expect(fd, "after\n"));
	close(fd);
}

static void test_line_over_buffer_closes(void)
{
	char line[LINE_MAX_ + 1];
	int fd = client_tcp(port);

	memset(line, 'x', sizeof(line));
	CHECK_EQ_INT(client_send(fd, line, sizeof(line)), 0);
	CHECK(client_end(fd) != CLIENT_OPEN);
	close(fd);
}

static void test_connection_limit(void)
{
	int a, b, c;

	settle();
	a = client_tcp(port);
	b = client_tcp(port);
	c = client_tcp(port);
	CHECK(a >= 0 && b >= 0 && c >= 0);
	CHECK(client_end(c) != CLIENT_OPEN);
	CHECK_EQ_INT(client_send_str(a, "a\n"), 0);
	CHECK_EQ_INT(client_send_str(b, "b\n"), 0);
	CHECK(expect(a, "a\n"));
	CHECK(expect(b, "b\n"));
	close(a);
	close(b);
	close(c);
}

/* Each reply restarts the timeout: a busy connection outlives it. */
static void test_timeout_restarts(void)
{
	struct timespec step = { .tv_nsec = 100 * 1000 * 1000 };
	int fd, i;

	settle();
	fd = client_tcp(port);
	for (i = 0; i < 8; i++) {
		CHECK_EQ_INT(client_send_str(fd, "ping\n"), 0);
		CHECK(expect(fd, "ping\n"));
		nanosleep(&step, NULL);
	}
	close(fd);
}

/* Bytes that never make a request do not keep a connection open past the timeout. */
static void test_timeout_despite_trickle(void)
{
	struct timespec step = { .tv_nsec = 50 * 1000 * 1000 };
	double t0;
	int fd, i;

	settle();
	t0 = now();
	fd = client_tcp(port);
	CHECK_EQ_INT(client_send_str(fd, "ok\n"), 0);
	CHECK(expect(fd, "ok\n"));
	for (i = 0; i < 20 && client_send_str(fd, "x") == 0; i++)
		nanosleep(&step, NULL);
	CHECK(client_end(fd) != CLIENT_OPEN);
	CHECK(now() - t0 < 3 * TIMEOUT + 0.5);
	CHECK(now() - t0 >= TIMEOUT);
	close(fd);
}

int main(void)
{
	memset(big, 'b', sizeof(big));
	big[0] = '<';
	big[sizeof(big) - 1] = '\n';
	if (start() < 0)
		return 1;
	RUN(test_pipelined_in_order);
	RUN(test_close_after_reply);
	RUN(test_half_close_gets_replies);
	RUN(test_big_reply_slow_reader);
	RUN(test_line_over_buffer_closes);
	RUN(test_connection_limit);
	RUN(test_timeout_restarts);
	RUN(test_timeout_despite_trickle);
	stop();
	return UNIT_DONE();
}
