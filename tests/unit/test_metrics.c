/* Unit tests of metrics: the renderer on hand-made snapshots (values, histogram
 * arithmetic, the exposition format), then the HTTP endpoint on a loop thread. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "acct.h"
#include "counters.h"
#include "fakelive.h"
#include "loopthread.h"
#include "metrics.h"
#include "teamspend.h"
#include "unit.h"

static char page[65536];

static int has_line(const char *text, const char *line)
{
	size_t n = strlen(line);
	const char *p = text;

	while ((p = strstr(p, line))) {
		if ((p == text || p[-1] == '\n') && p[n] == '\n')
			return 1;
		p += n;
	}
	return 0;
}

static void sample_snapshot(struct statsnap *s)
{
	int i;

	memset(s, 0, sizeof(*s));
	s->acct.received = 11;
	s->acct.written = 12;
	s->acct.dropped = 13;
	s->acct.duplicates = 14;
	s->acct.timed_out = 15;
	s->acct.unpriced = 16;
	s->records_tcp = 17;
	s->records_udp = 18;
	s->records_backlog = 19;
	s->batches = 19;
	s->long_bodies_whole = 27;
	s->long_bodies_refused = 28;
	s->model_mismatches = 31;
	s->spop_connections = 20;
	s->spop_connections_open = 21;
	s->spop_frames_in = 22;
	s->spop_frames_out = 23;
	s->queue_depth = 24;
	s->queue_capacity = 25;
	s->inflight = 26;
	s->stored_responses = 29;
	s->spilled_rows = 30;
	s->spill_head_ms = 1000;   /* long ago: the lag is large */
	for (i = 0; i < DECISION_VERDICT_COUNT; i++)
		s->verdicts[i] = 100 + (uint64_t)i;
	for (i = 0; i < ACCT_OUTCOME_COUNT; i++)
		s->outcomes[i] = 200 + (uint64_t)i;
	for (i = 0; i < STATS_ERR_COUNT; i++)
		s->errors[i] = 300 + (uint64_t)i;
	/* 1 at <= 1 us, 2 at <= 5 us, 3 beyond 5 s */
	s->batch_latency.buckets[0] = 1;
	s->batch_latency.buckets[2] = 2;
	s->batch_latency.buckets[STATS_HIST_NBOUNDS] = 3;
	s->batch_latency.count = 6;
	s->batch_latency.sum_ns = 16500012000u;
	s->decision_latency.buckets[9] = 4;      /* <= 1 ms */
	s->decision_latency.count = 4;
	s->decision_latency.sum_ns = 2000000;
}

static void test_render_values(void)
{
	struct statsnap s;
	char line[128];
	int i;

	sample_snapshot(&s);
	metrics_render(&s, page, sizeof(page));
	CHECK(has_line(page, "tally_accounting_received_total 11"));
	CHECK(has_line(page, "tally_accounting_written_total 12"));
	CHECK(has_line(page, "tally_accounting_dropped_total 13"));
	CHECK(has_line(page, "tally_accounting_duplicates_total 14"));
	CHECK(has_line(page, "tally_accounting_timed_out_total 15"));
	CHECK(has_line(page, "tally_accounting_unpriced_total 16"));
	CHECK(has_line(page, "tally_records_total{transport=\"tcp\"} 17"));
	CHECK(has_line(page, "tally_records_total{transport=\"udp\"} 18"));
	CHECK(has_line(page, "tally_records_total{transport=\"backlog\"} 19"));
	CHECK(has_line(page, "tally_writer_batches_total 19"));
	CHECK(has_line(page, "tally_long_bodies_total{result=\"whole\"} 27"));
	CHECK(has_line(page, "tally_long_bodies_total{result=\"refused\"} 28"));
	CHECK(has_line(page, "tally_model_mismatch_total 31"));
	CHECK(has_line(page, "tally_spop_connections_total 20"));
	CHECK(has_line(page, "tally_spop_connections_open 21"));
	CHECK(has_line(page, "tally_spop_frames_total{direction=\"in\"} 22"));
	CHECK(has_line(page, "tally_spop_frames_total{direction=\"out\"} 23"));
	CHECK(has_line(page, "tally_queue_depth 24"));
	CHECK(has_line(page, "tally_queue_capacity 25"));
	CHECK(has_line(page, "tally_spilled_rows 30"));
	CHECK(has_line(page, "# TYPE tally_writer_lag_seconds gauge"));
	CHECK(!has_line(page, "tally_writer_lag_seconds 0"));
	CHECK(has_line(page, "tally_inflight_requests 26"));
	CHECK(has_line(page, "tally_stored_responses 29"));
	CHECK(has_line(page, "# TYPE tally_queue_depth gauge"));
	CHECK(has_line(page, "# TYPE tally_accounting_received_total counter"));
	for (i = 0; i < DECISION_VERDICT_COUNT; i++) {
		snprintf(line, sizeof(line), "tally_verdicts_total{verdict=\"%s\"} %d",
		         decision_verdict_name((enum decision_verdict)i), 100 + i);
		CHECK(has_line(page, line));
	}
	for (i = 0; i < ACCT_OUTCOME_COUNT; i++) {
		snprintf(line, sizeof(line), "tally_rows_total{outcome=\"%s\"} %d",
		         acct_outcome_name((enum acct_outcome)i), 200 + i);
		CHECK(has_line(page, line));
	}
	for (i = 0; i < STATS_ERR_COUNT; i++) {
		snprintf(line, sizeof(line), "tally_errors_total{kind=\"%s\"} %d",
		         stats_error_name((enum stats_error)i), 300 + i);
		CHECK(has_line(page, line));
	}
}

static void test_render_histograms(void)
{
	struct statsnap s;

	sample_snapshot(&s);
	metrics_render(&s, page, sizeof(page));
	CHECK(has_line(page, "# TYPE tally_writer_batch_seconds histogram"));
	CHECK(has_line(page, "tally_writer_batch_seconds_bucket{le=\"0.000001\"} 1"));
	CHECK(has_line(page, "tally_writer_batch_seconds_bucket{le=\"0.000002\"} 1"));
	CHECK(has_line(page, "tally_writer_batch_seconds_bucket{le=\"0.000005\"} 3"));
	CHECK(has_line(page, "tally_writer_batch_seconds_bucket{le=\"0.5\"} 3"));
	CHECK(has_line(page, "tally_writer_batch_seconds_bucket{le=\"5\"} 3"));
	CHECK(has_line(page, "tally_writer_batch_seconds_bucket{le=\"+Inf\"} 6"));
	CHECK(has_line(page, "tally_writer_batch_seconds_count 6"));
	CHECK(has_line(page, "tally_writer_batch_seconds_sum 16.500012"));
	CHECK(has_line(page, "tally_decision_seconds_bucket{le=\"0.0005\"} 0"));
	CHECK(has_line(page, "tally_decision_seconds_bucket{le=\"0.001\"} 4"));
	CHECK(has_line(page, "tally_decision_seconds_bucket{le=\"+Inf\"} 4"));
	CHECK(has_line(page, "tally_decision_seconds_sum 0.002"));
}

/* The text format: every sample belongs to a family declared (HELP, then TYPE) before
 * it, each family once, and every value parses as a number. */
static void test_render_format(void)
{
	static const char *const suffixes[] = { "_bucket", "_sum", "_count" };
	char declared[64][64];
	int ndeclared = 0, nsamples = 0, i;
	struct statsnap s;
	char *save = NULL, *line;
	size_t len;

	sample_snapshot(&s);
	len = metrics_render(&s, page, sizeof(page));
	CHECK(len == strlen(page));
	CHECK(len > 0 && page[len - 1] == '\n');
	for (line = strtok_r(page, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char name[64], help_name[64], *value, *end;
		int known = 0;

		if (strncmp(line, "# HELP ", 7) == 0) {
			CHECK(sscanf(line + 7, "%63s", help_name) == 1);
			continue;
		}
		if (strncmp(line, "# TYPE ", 7) == 0) {
			CHECK(sscanf(line + 7, "%63s", name) == 1);
			CHECK_EQ_STR(name, help_name);
			for (i = 0; i < ndeclared; i++)
				CHECK(strcmp(declared[i], name) != 0);
			if (ndeclared < 64)
				strcpy(declared[ndeclared++], name);
			continue;
		}
		nsamples++;
		CHECK(sscanf(line, "%63[a-z_]", name) == 1);
		for (i = 0; i < ndeclared && !known; i++) {
			size_t k, dn = strlen(declared[i]);

			if (strcmp(name, declared[i]) == 0)
				known = 1;
			for (k = 0; k < 3 && !known; k++)
				known = strncmp(name, declared[i], dn) == 0 &&
				        strcmp(name + dn, suffixes[k]) == 0;
		}
		CHECK(known);
		value = strrchr(line, ' ');
		CHECK(value != NULL);
		if (value) {
			strtod(value + 1, &end);
			CHECK(end != value + 1 && *end == '\0');
		}
	}
	/* 27: the writer's last commit, the spilled rows, the writer's lag and model mismatches
	 * included. */
	CHECK_EQ_INT(ndeclared, 27);
	CHECK_EQ_INT(nsamples, 26 + 2 * (STATS_HIST_NBOUNDS + 3) + DECISION_VERDICT_COUNT +
	                       ACCT_OUTCOME_COUNT + STATS_ERR_COUNT);
}

/* Like snprintf: a short buffer gets a terminated prefix and the full length. */
static void test_render_short_buffer(void)
{
	static char small[100];
	struct statsnap s;
	size_t full, n;

	sample_snapshot(&s);
	full = metrics_render(&s, page, sizeof(page));
	CHECK_EQ_INT(metrics_render(&s, NULL, 0), full);
	n = metrics_render(&s, small, sizeof(small));
	CHECK_EQ_INT(n, full);
	CHECK_EQ_INT(strlen(small), sizeof(small) - 1);
	CHECK(memcmp(small, page, sizeof(small) - 1) == 0);
}

/* The histogram's count is the sum of its buckets, whatever count said. */
static void test_snapshot_take(void)
{
	struct statsnap s;

	memset(&stats, 0, sizeof(stats));
	counters_set(&(struct counters){ .received = 5 });
	stats_add(&stats.verdicts[DECISION_UNKNOWN_KEY], 2);
	stats_hist_observe(&stats.batch_latency, 1500);
	stats_hist_observe(&stats.batch_latency, 7000000000u);
	stats_add(&stats.batch_latency.count, 1);
	statsnap_take(&s, &stats, &fakelive);
	CHECK_EQ_INT(s.acct.received, 5);
	CHECK_EQ_INT(s.verdicts[DECISION_UNKNOWN_KEY], 2);
	CHECK_EQ_INT(s.batch_latency.buckets[1], 1);
	CHECK_EQ_INT(s.batch_latency.buckets[STATS_HIST_NBOUNDS], 1);
	CHECK_EQ_INT(s.batch_latency.count, 2);
	CHECK_EQ_INT(s.batch_latency.sum_ns, 7000001500u);
	CHECK_EQ_INT(s.queue_depth, FAKELIVE_DEPTH);
	CHECK_EQ_INT(s.queue_capacity, FAKELIVE_CAPACITY);
	CHECK_EQ_INT(s.inflight, FAKELIVE_INFLIGHT);
	memset(&stats, 0, sizeof(stats));
}

/* ---- over HTTP ---- */

static struct loopthread lt;
static struct metrics *m;
static int port;

struct response {
	int status;
	char head[2048];
	char *body;
	size_t body_len;
};

/* Reads a response's status line and headers into r. */
static int read_head(int fd, struct response *r)
{
	size_t n = 0;
	const char *cl;

	memset(r, 0, sizeof(*r));
	while (n < sizeof(r->head) - 1) {
		if (client_recv(fd, r->head + n, 1) < 0)
			return -1;
		n++;
		if (n >= 4 && memcmp(r->head + n - 4, "\r\n\r\n", 4) == 0)
			break;
	}
	if (sscanf(r->head, "HTTP/1.1 %d ", &r->status) != 1 ||
	    !(cl = strstr(r->head, "Content-Length: ")))
		return -1;
	r->body_len = strtoul(cl + 16, NULL, 10);
	return 0;
}

/* Reads one response (Content-Length framed) into r; r->body is malloc'd. */
static int read_response(int fd, struct response *r)
{
	if (read_head(fd, r) < 0 || !(r->body = calloc(1, r->body_len + 1)) ||
	    client_recv(fd, r->body, r->body_len) < 0)
		return -1;
	return 0;
}

/* Sends req on a new connection and reads one response; returns the connection. */
static int exchange(const char *req, struct response *r)
{
	int fd = client_tcp(port);

	if (fd < 0 || client_send_str(fd, req) < 0 || read_response(fd, r) < 0) {
		fprintf(stderr, "exchange failed for %.40s\n", req);
		r->status = -1;
	}
	return fd;
}

static void test_http_get_metrics(void)
{
	struct response r;
	int fd;

	counters_set(&(struct counters){ .received = 12345 });
	stats_add(&stats.errors[STATS_ERR_SPOP], 3);
	stats_hist_observe(&stats.decision_latency, 3000);
	fd = exchange("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", &r);
	CHECK_EQ_INT(r.status, 200);
	CHECK(strstr(r.head, "Content-Type: text/plain; version=0.0.4") != NULL);
	CHECK(strstr(r.head, "Connection: close") == NULL);
	CHECK(r.body && has_line(r.body, "tally_accounting_received_total 12345"));
	CHECK(r.body && has_line(r.body, "tally_errors_total{kind=\"spop\"} 3"));
	CHECK(r.body && has_line(r.body, "tally_decision_seconds_bucket{le=\"0.000005\"} 1"));
	CHECK(r.body && has_line(r.body, "tally_queue_depth 7"));
	CHECK(r.body && has_line(r.body, "tally_queue_capacity 4096"));
	CHECK(r.body && has_line(r.body, "tally_inflight_requests 3"));
	free(r.body);
	/* the same connection serves the next request, with fresh values */
	counters_receive();
	CHECK_EQ_INT(client_send_str(fd, "GET /metrics?x=1 HTTP/1.1\r\n\r\n"), 0);
	CHECK_EQ_INT(read_response(fd, &r), 0);
	CHECK_EQ_INT(r.status, 200);
	CHECK(r.body && has_line(r.body, "tally_accounting_received_total 12346"));
	free(r.body);
	close(fd);
}

static void test_http_pipelined(void)
{
	struct response r;
	int fd = exchange("GET /nope HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n"
	                  "GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n", &r);

	CHECK_EQ_INT(r.status, 404);
	free(r.body);
	CHECK_EQ_INT(read_response(fd, &r), 0);
	CHECK_EQ_INT(r.status, 200);
	free(r.body);
	CHECK_EQ_INT(read_response(fd, &r), 0);
	CHECK_EQ_INT(r.status, 200);
	CHECK(strstr(r.head, "Connection: close") != NULL);
	free(r.body);
	CHECK_EQ_INT(client_end(fd), CLIENT_EOF);
	close(fd);
}

static void test_http_errors(void)
{
	static char huge[METRICS_REQUEST_MAX + 200];
	struct timespec pause = { .tv_nsec = 20 * 1000 * 1000 };
	struct response r;
	int fd;

	fd = exchange("GET / HTTP/1.1\r\n\r\n", &r);
	CHECK_EQ_INT(r.status, 404);
	free(r.body);
	close(fd);
	fd = exchange("POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi", &r);
	CHECK_EQ_INT(r.status, 405);
	CHECK(strstr(r.head, "Allow: GET") != NULL);
	free(r.body);
	/* still open after a 405 */
	CHECK_EQ_INT(client_send_str(fd, "GET /metrics HTTP/1.1\r\n\r\n"), 0);
	CHECK_EQ_INT(read_response(fd, &r), 0);
	CHECK_EQ_INT(r.status, 200);
	free(r.body);
	close(fd);
	fd = exchange("HELLO\r\n\r\n", &r);
	CHECK_EQ_INT(r.status, 400);
	CHECK(strstr(r.head, "Connection: close") != NULL);
	CHECK_EQ_INT(client_end(fd), CLIENT_EOF);
	free(r.body);
	close(fd);
	/* headers beyond the request limit, in two writes so that the server's reads do
	 * not end at the limit */
	snprintf(huge, sizeof(huge), "GET /metrics HTTP/1.1\r\nX-Pad: %0*d\r\n\r\n",
	         METRICS_REQUEST_MAX, 0);
	fd = client_tcp(port);
	CHECK_EQ_INT(client_send(fd, huge, 5000), 0);
	nanosleep(&pause, NULL);
	CHECK_EQ_INT(client_send_str(fd, huge + 5000), 0);
	CHECK_EQ_INT(read_response(fd, &r), 0);
	CHECK_EQ_INT(r.status, 431);
	CHECK_EQ_INT(client_end(fd), CLIENT_EOF);
	free(r.body);
	close(fd);
	/* a body beyond it */
	snprintf(huge, sizeof(huge), "GET /metrics HTTP/1.1\r\nContent-Length: %d\r\n\r\n%0*d",
	         METRICS_REQUEST_MAX, METRICS_REQUEST_MAX, 0);
	fd = exchange(huge, &r);
	CHECK_EQ_INT(r.status, 413);
	CHECK_EQ_INT(client_end(fd), CLIENT_EOF);
	free(r.body);
	close(fd);
}

/* HEAD is not served, and its reply carries no body: the next reply starts right
 * after the headers. */
static void test_http_head(void)
{
	struct response r;
	int fd = client_tcp(port);

	CHECK_EQ_INT(client_send_str(fd, "HEAD /metrics HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\n\r\n"), 0);
	CHECK_EQ_INT(read_head(fd, &r), 0);
	CHECK_EQ_INT(r.status, 405);
	CHECK(r.body_len > 0);
	CHECK_EQ_INT(read_response(fd, &r), 0);
	CHECK_EQ_INT(r.status, 200);
	free(r.body);
	close(fd);
}

static void test_http10(void)
{
	struct response r;
	int fd = exchange("GET /metrics HTTP/1.0\r\n\r\n", &r);

	CHECK_EQ_INT(r.status, 200);
	CHECK_EQ_INT(client_end(fd), CLIENT_EOF);
	free(r.body);
	close(fd);
	fd = exchange("GET /metrics HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", &r);
	CHECK_EQ_INT(r.status, 200);
	CHECK(strstr(r.head, "Connection: keep-alive") != NULL);
	free(r.body);
	CHECK_EQ_INT(client_send_str(fd, "GET /metrics HTTP/1.0\r\n\r\n"), 0);
	CHECK_EQ_INT(read_response(fd, &r), 0);
	CHECK_EQ_INT(r.status, 200);
	free(r.body);
	close(fd);
}

/* A request split into single bytes is still one request. */
static void test_http_trickled(void)
{
	const char *req = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
	struct response r;
	int fd = client_tcp(port);
	size_t i;

	for (i = 0; req[i]; i++)
		CHECK_EQ_INT(client_send(fd, req + i, 1), 0);
	CHECK_EQ_INT(read_response(fd, &r), 0);
	CHECK_EQ_INT(r.status, 200);
	free(r.body);
	close(fd);
}

static void test_start_errors(void)
{
	char err[256] = "";

	CHECK(metrics_start(lt.loop, "unix:/tmp/x.sock", &fakelive, err, sizeof(err)) == NULL);
	CHECK(strstr(err, "host:port") != NULL);
	CHECK(metrics_start(lt.loop, "nonsense", &fakelive, err, sizeof(err)) == NULL);
	CHECK(err[0] != '\0');
}

/* The teams' gauges: one line per team, labels escaped, budgets only where set, what
 * is left negative once overspent, the length asked for when the buffer is short. */
static void test_render_teams(void)
{
	struct teamspend_team t[3] = {
		{ "atlas", QUOTA_PERIOD_MONTH, 500000000, 120000000 },
		{ "we\"ird\\\nname", QUOTA_PERIOD_DAY, 1000, 1500 },
		{ "free", QUOTA_PERIOD_MONTH, 0, 42 },
	};
	size_t n = metrics_render_teams(t, 3, page, sizeof(page));

	CHECK_EQ_INT(n, strlen(page));
	CHECK(has_line(page, "# TYPE tally_team_spent_micros gauge"));
	CHECK(has_line(page, "tally_team_spent_micros{team=\"atlas\",period=\"month\"} 120000000"));
	CHECK(has_line(page, "tally_team_budget_left_micros{team=\"atlas\",period=\"month\"} 380000000"));
	CHECK(has_line(page, "tally_team_spent_micros{team=\"we\\\"ird\\\\\\nname\",period=\"day\"} 1500"));
	CHECK(has_line(page, "tally_team_budget_left_micros{team=\"we\\\"ird\\\\\\nname\",period=\"day\"} -500"));
	CHECK(has_line(page, "tally_team_spent_micros{team=\"free\",period=\"month\"} 42"));
	CHECK(strstr(page, "tally_team_budget_micros{team=\"free\"") == NULL);
	CHECK(strstr(page, "tally_team_budget_left_micros{team=\"free\"") == NULL);
	CHECK_EQ_INT(metrics_render_teams(t, 3, page, 10), n);
	CHECK_EQ_INT(metrics_render_teams(t, 0, page, sizeof(page)), 0);
}

int main(void)
{
	char addr[32], err[256];

	RUN(test_render_values);
	RUN(test_render_histograms);
	RUN(test_render_format);
	RUN(test_render_short_buffer);
	RUN(test_snapshot_take);
	port = client_free_port();
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	if (loopthread_init(&lt) < 0)
		return 1;
	RUN(test_start_errors);
	if (!(m = metrics_start(lt.loop, addr, &fakelive, err, sizeof(err))) || loopthread_run(&lt) < 0) {
		fprintf(stderr, "metrics_start: %s\n", err);
		return 1;
	}
	RUN(test_http_get_metrics);
	RUN(test_http_pipelined);
	RUN(test_http_errors);
	RUN(test_render_teams);
	RUN(test_http_head);
	RUN(test_http10);
	RUN(test_http_trickled);
	loopthread_join(&lt);
	metrics_stop(m);
	loopthread_destroy(&lt);
	return UNIT_DONE();
}
