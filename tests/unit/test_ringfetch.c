/* Unit tests of ringfetch: line splitting over any cut of the answer, a line too long
 * to keep, and the exchange with a real unix socket standing in for HAProxy's CLI
 * (the command it receives, an answer without a final newline, a silent peer, no
 * socket). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ringfetch.h"
#include "tmpdir.h"
#include "unit.h"

struct got {
	char text[4096];
	size_t len;
	long n;
};

static void collect(void *arg, const char *line, size_t len)
{
	struct got *g = arg;

	if (g->len + len + 1 < sizeof(g->text)) {
		memcpy(g->text + g->len, line, len);
		g->len += len;
		g->text[g->len++] = '|';
		g->text[g->len] = '\0';
	}
	g->n++;
}

/* The answer fed in two pieces cut at every offset gives the same lines. */
static void test_split_any_cut(void)
{
	const char *answer = "tally2 a\n\ntally2 bb\ntally2 ccc\n";
	size_t total = strlen(answer), cut;
	static char buf[RINGFETCH_LINE_MAX];

	for (cut = 0; cut <= total; cut++) {
		struct got g = { .len = 0 };
		size_t held;
		long lines = 0;
		int skipping = 0;

		memcpy(buf, answer, cut);
		held = ringfetch_split(buf, cut, &skipping, collect, &g, &lines);
		memcpy(buf + held, answer + cut, total - cut);
		held = ringfetch_split(buf, held + total - cut, &skipping, collect, &g, &lines);
		CHECK_EQ_INT(held, 0);
		CHECK_EQ_STR(g.text, "tally2 a|tally2 bb|tally2 ccc|");
		CHECK_EQ_INT(lines, 3);
	}
}

/* A line that does not fit is dropped to its newline; the next one comes through. */
static void test_split_too_long(void)
{
	static char buf[RINGFETCH_LINE_MAX];
	struct got g = { .len = 0 };
	long lines = 0;
	int skipping = 0;
	size_t held;

	memset(buf, 'x', sizeof(buf));
	held = ringfetch_split(buf, sizeof(buf), &skipping, collect, &g, &lines);
	CHECK_EQ_INT(held, 0);
	CHECK_EQ_INT(skipping, 1);
	memcpy(buf, "xxxx\ntally2 ok\n", 15);
	held = ringfetch_split(buf, 15, &skipping, collect, &g, &lines);
	CHECK_EQ_INT(held, 0);
	CHECK_EQ_STR(g.text, "tally2 ok|");
	CHECK_EQ_INT(lines, 1);
}

/* A one-shot CLI: reads one command line, answers, closes (or stays silent). */
struct cli {
	int lfd;
	const char *answer;       /* NULL: say nothing, keep the connection open */
	char command[128];
};

static void *cli_main(void *arg)
{
	struct cli *c = arg;
	int fd = accept(c->lfd, NULL, NULL);
	size_t n = 0;
	ssize_t r;

	if (fd < 0)
		return NULL;
	while (n < sizeof(c->command) - 1 && (r = read(fd, c->command + n, 1)) == 1)
		if (c->command[n++] == '\n')
			break;
	c->command[n] = '\0';
	if (c->answer)
		CHECK(write(fd, c->answer, strlen(c->answer)) == (ssize_t)strlen(c->answer));
	else
		sleep(1);
	close(fd);
	return NULL;
}

static int cli_listen(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	if (strlen(path) >= sizeof(sa.sun_path))
		return -1;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	unlink(path);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 4) < 0)
		return -1;
	return fd;
}

static void test_exchange(void)
{
	struct cli c = { .answer = "tally2 one\ntally2 two\ntally2 three" };
	struct got g = { .len = 0 };
	char path[512], err[256];
	pthread_t t;
	long n;

	if (tmpdir_make("ringfetch") < 0) {
		CHECK(0);
		return;
	}
	memcpy(path, tmpdir_file("cli.sock"), strlen(tmpdir_file("cli.sock")) + 1);
	c.lfd = cli_listen(path);
	CHECK(c.lfd >= 0);
	CHECK_EQ_INT(pthread_create(&t, NULL, cli_main, &c), 0);
	n = ringfetch_events(path, "tally-records", 2000, collect, &g, err, sizeof(err));
	pthread_join(t, NULL);
	CHECK_EQ_INT(n, 3);
	CHECK_EQ_STR(c.command, "show events tally-records\n");
	CHECK_EQ_STR(g.text, "tally2 one|tally2 two|tally2 three|");

	/* a peer that never answers: the timeout ends it */
	c.answer = NULL;
	CHECK_EQ_INT(pthread_create(&t, NULL, cli_main, &c), 0);
	n = ringfetch_events(path, "tally-records", 200, collect, &g, err, sizeof(err));
	CHECK_EQ_INT(n, -1);
	CHECK(strstr(err, "within 200 ms") != NULL);
	pthread_join(t, NULL);
	close(c.lfd);

	/* a socket file nobody listens on, no socket file: no HAProxy, told apart from a
	 * failure; a ring name that could smuggle a second command */
	CHECK_EQ_INT(ringfetch_events(path, "tally-records", 200, collect, &g, err, sizeof(err)),
	             RINGFETCH_ABSENT);
	unlink(path);
	CHECK_EQ_INT(ringfetch_events(path, "tally-records", 200, collect, &g, err, sizeof(err)),
	             RINGFETCH_ABSENT);
	CHECK_EQ_INT(ringfetch_events(path, "r;shutdown", 200, collect, &g, err, sizeof(err)), -1);
	CHECK_EQ_INT(ringfetch_events(path, "r\nshow", 200, collect, &g, err, sizeof(err)), -1);
	tmpdir_remove();
}

int main(void)
{
	RUN(test_split_any_cut);
	RUN(test_split_too_long);
	RUN(test_exchange);
	return UNIT_DONE();
}
