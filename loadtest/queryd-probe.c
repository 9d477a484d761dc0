/* queryd-probe: the HTTP client of loadtest/bench-queryd.sh. One thread, one keep-alive
 * connection, blocking sockets and Debian's http-parser: requests go out one at a time,
 * so each latency is the server's answer plus this loop's own cost (a few µs; the
 * script reports /api/health as the floor).
 *
 * Reads endpoints from stdin, one "NAME PATH" a line, then either
 *   measures: each endpoint -n times in a row (or for --max-seconds, whichever ends
 *     first) after --warmup unmeasured calls, and prints "NAME p50_ms p95_ms max_ms
 *     body_bytes count" per endpoint;
 *   or polls (--interval-ms, --duration-s): the whole list once per interval, as a
 *     dashboard refreshing, and prints "polls N requests M".
 * Any answer other than 200 exits 1, naming the path. */
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <http_parser.h>

#define PROBE_MAX_ENDPOINTS 64
#define PROBE_LINE_MAX      2048

struct probe_endpoint {
	char name[64];
	char path[PROBE_LINE_MAX];
};

struct probe {
	const char *host, *port, *token;
	int fd;                        /* -1: not connected */
	http_parser parser;
	int done;                      /* the response is complete */
	size_t body_bytes;
};

static uint64_t probe_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int probe_on_body(http_parser *p, const char *at, size_t n)
{
	(void)at;
	((struct probe *)p->data)->body_bytes += n;
	return 0;
}

static int probe_on_complete(http_parser *p)
{
	((struct probe *)p->data)->done = 1;
	return 0;
}

static const http_parser_settings probe_settings = {
	.on_body = probe_on_body,
	.on_message_complete = probe_on_complete,
};

static int probe_connect(struct probe *pr)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai = NULL;
	int one = 1, rc = getaddrinfo(pr->host, pr->port, &hints, &ai);

	if (rc != 0) {
		fprintf(stderr, "queryd-probe: %s:%s: %s\n", pr->host, pr->port, gai_strerror(rc));
		return -1;
	}
	pr->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (pr->fd < 0 || connect(pr->fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		fprintf(stderr, "queryd-probe: connect %s:%s: %s\n", pr->host, pr->port, strerror(errno));
		if (pr->fd >= 0)
			close(pr->fd);
		pr->fd = -1;
		freeaddrinfo(ai);
		return -1;
	}
	setsockopt(pr->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	freeaddrinfo(ai);
	return 0;
}

/* GET path; 0 with the response read whole and status 200, else -1. */
static int probe_get(struct probe *pr, const char *path)
{
	char req[PROBE_LINE_MAX + 512], buf[65536];
	int len = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: %s\r\n"
	                   "Authorization: Bearer %s\r\n\r\n", path, pr->host, pr->token);
	ssize_t n;

	if (pr->fd < 0 && probe_connect(pr) < 0)
		return -1;
	if (write(pr->fd, req, (size_t)len) != len) {
		fprintf(stderr, "queryd-probe: write: %s\n", strerror(errno));
		return -1;
	}
	http_parser_init(&pr->parser, HTTP_RESPONSE);
	pr->parser.data = pr;
	pr->done = 0;
	pr->body_bytes = 0;
	while (!pr->done) {
		n = read(pr->fd, buf, sizeof(buf));
		/* A read of 0 tells a response delimited by the end of the connection. */
		if (n < 0 || http_parser_execute(&pr->parser, &probe_settings, buf, (size_t)n) != (size_t)n ||
		    (n == 0 && !pr->done)) {
			fprintf(stderr, "queryd-probe: %s: connection failed or bad response (%s)\n",
			        path, http_errno_name(HTTP_PARSER_ERRNO(&pr->parser)));
			return -1;
		}
	}
	if (!http_should_keep_alive(&pr->parser)) {
		close(pr->fd);
		pr->fd = -1;
	}
	if (pr->parser.status_code != 200) {
		fprintf(stderr, "queryd-probe: %s: status %u\n", path, pr->parser.status_code);
		return -1;
	}
	return 0;
}

static int probe_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The value of rank ceil(q * n) in sorted v[0..n), in ms. */
static double probe_quantile(const uint64_t *v, size_t n, double q)
{
	size_t rank = (size_t)(q * (double)n + 0.999999);

	return (double)v[rank ? rank - 1 : 0] / 1e6;
}

static int probe_measure(struct probe *pr, const struct probe_endpoint *e, long n, long warmup,
                         double max_s)
{
	uint64_t *lat = malloc((size_t)n * sizeof(*lat)), t0, start;
	long i;
	int rc = -1;

	if (!lat)
		return -1;
	for (i = 0; i < warmup; i++)
		if (probe_get(pr, e->path) < 0)
			goto out;
	start = probe_now_ns();
	for (i = 0; i < n && (double)(probe_now_ns() - start) < max_s * 1e9; i++) {
		t0 = probe_now_ns();
		if (probe_get(pr, e->path) < 0)
			goto out;
		lat[i] = probe_now_ns() - t0;
	}
	qsort(lat, (size_t)i, sizeof(*lat), probe_cmp);
	printf("%s %.3f %.3f %.3f %zu %ld\n", e->name, probe_quantile(lat, (size_t)i, 0.50),
	       probe_quantile(lat, (size_t)i, 0.95), (double)lat[i - 1] / 1e6, pr->body_bytes, i);
	fflush(stdout);
	rc = 0;
out:
	free(lat);
	return rc;
}

static int probe_poll(struct probe *pr, const struct probe_endpoint *e, size_t ne,
                      long interval_ms, double duration_s)
{
	uint64_t start = probe_now_ns(), next = start, now;
	long polls = 0;
	size_t i;

	while ((now = probe_now_ns()) - start < (uint64_t)(duration_s * 1e9)) {
		if (now < next) {
			uint64_t d = next - now;

			nanosleep(&(struct timespec){ (time_t)(d / 1000000000u), (long)(d % 1000000000u) },
			          NULL);
			continue;
		}
		for (i = 0; i < ne; i++)
			if (probe_get(pr, e[i].path) < 0)
				return -1;
		polls++;
		next += (uint64_t)interval_ms * 1000000u;
	}
	printf("polls %ld requests %ld\n", polls, polls * (long)ne);
	return 0;
}

static int probe_usage(void)
{
	fprintf(stderr, "usage: queryd-probe --addr HOST:PORT [-n N] [--warmup W] [--max-seconds S]"
	        " [--interval-ms MS --duration-s S] < endpoints\n"
	        "  endpoints: one \"NAME PATH\" a line; token from TALLY_OPERATOR_TOKEN\n");
	return 2;
}

int main(int argc, char **argv)
{
	static struct probe_endpoint eps[PROBE_MAX_ENDPOINTS];
	struct probe pr = { .fd = -1, .token = getenv("TALLY_OPERATOR_TOKEN") };
	char line[PROBE_LINE_MAX + 80], *colon, *addr = NULL;
	long n = 200, warmup = 5, interval_ms = 0;
	double duration_s = 0, max_s = 1e9;
	size_t ne = 0, i;
	int a, rc = 1;

	for (a = 1; a + 1 < argc; a += 2) {
		if (strcmp(argv[a], "--addr") == 0)
			addr = argv[a + 1];
		else if (strcmp(argv[a], "-n") == 0)
			n = atol(argv[a + 1]);
		else if (strcmp(argv[a], "--warmup") == 0)
			warmup = atol(argv[a + 1]);
		else if (strcmp(argv[a], "--interval-ms") == 0)
			interval_ms = atol(argv[a + 1]);
		else if (strcmp(argv[a], "--duration-s") == 0)
			duration_s = atof(argv[a + 1]);
		else if (strcmp(argv[a], "--max-seconds") == 0)
			max_s = atof(argv[a + 1]);
		else
			return probe_usage();
	}
	if (a != argc || !addr || !pr.token || n < 1 || warmup < 0 || max_s <= 0 ||
	    (interval_ms > 0) != (duration_s > 0) || !(colon = strrchr(addr, ':')))
		return probe_usage();
	*colon = '\0';
	pr.host = addr;
	pr.port = colon + 1;
	while (fgets(line, sizeof(line), stdin) && ne < PROBE_MAX_ENDPOINTS)
		if (sscanf(line, "%63s %2047s", eps[ne].name, eps[ne].path) == 2)
			ne++;
	if (!ne)
		return probe_usage();
	if (interval_ms > 0) {
		rc = probe_poll(&pr, eps, ne, interval_ms, duration_s) < 0;
		goto out;
	}
	for (i = 0; i < ne; i++)
		if (probe_measure(&pr, &eps[i], n, warmup, max_s) < 0)
			goto out;
	rc = 0;
out:
	if (pr.fd >= 0)
		close(pr.fd);
	return rc;
}
