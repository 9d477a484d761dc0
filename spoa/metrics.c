/* metrics: the Prometheus endpoint (see metrics.h). Main thread.
 *
 * HTTP/1.1 with keep-alive: GET /metrics is 200, another path 404, another method on
 * /metrics 405, a malformed request 400 and one over METRICS_REQUEST_MAX 431 (still in
 * its headers) or 413; those last three close the connection. http-parser reads the
 * requests; it pauses at the end of each, so that its reply goes out before the next
 * pipelined request is parsed. */
#include "metrics.h"

#include <http_parser.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acct.h"
#include "adminsrv.h"
#include "log.h"
#include "net.h"
#include "share.h"
#include "teamspend.h"

/* Longer targets are not ours (404) and are not kept. */
#define METRICS_URL_MAX 1024

struct metrics {
	struct adminsrv *srv;
	const struct live_view *live;
	struct share *share;         /* NULL: limits are not shared */
	struct teamspend *teams;     /* NULL: no team gauges */
	char *page;                  /* the last rendering, reused */
	size_t page_cap;
};

/* One connection's parser and the request being read. */
struct metrics_conn {
	http_parser parser;
	size_t req_bytes;            /* bytes of the current request so far */
	int headers_done;
	int keep_alive;              /* set when the request is complete */
	size_t url_len;              /* METRICS_URL_MAX: too long, not kept */
	char url[METRICS_URL_MAX];
};

/* ---- rendering ---- */

struct metrics_out {
	char *buf;
	size_t cap, len;             /* len may pass cap: then only the length counts */
};

static void metrics_printf(struct metrics_out *o, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void metrics_printf(struct metrics_out *o, const char *fmt, ...)
{
	int room = o->len < o->cap;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(room ? o->buf + o->len : NULL, room ? o->cap - o->len : 0, fmt, ap);
	va_end(ap);
	if (n > 0)
		o->len += (size_t)n;
}

static void metrics_head(struct metrics_out *o, const char *name, const char *type,
                         const char *help)
{
	metrics_printf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void metrics_counter(struct metrics_out *o, const char *name, const char *help,
                            uint64_t v)
{
	metrics_head(o, name, "counter", help);
	metrics_printf(o, "%s %" PRIu64 "\n", name, v);
}

static void metrics_gauge(struct metrics_out *o, const char *name, const char *help, int64_t v)
{
	metrics_head(o, name, "gauge", help);
	metrics_printf(o, "%s %" PRId64 "\n", name, v);
}

/* A counter with one label over an enum's values. The names are ours (snake_case), so
 * no label escaping is needed. */
static void metrics_family(struct metrics_out *o, const char *name, const char *help,
                           const char *label, const uint64_t *v, int n,
                           const char *(*value_name)(int))
{
	int i;

	metrics_head(o, name, "counter", help);
	for (i = 0; i < n; i++)
		metrics_printf(o, "%s{%s=\"%s\"} %" PRIu64 "\n", name, label, value_name(i), v[i]);
}

static const char *metrics_verdict_name(int i)
{
	return decision_verdict_name((enum decision_verdict)i);
}

static const char *metrics_outcome_name(int i)
{
	return acct_outcome_name((enum acct_outcome)i);
}

static const char *metrics_error_name(int i)
{
	return stats_error_name((enum stats_error)i);
}

/* ns as exact decimal seconds: 1000 -> "0.000001", 2000000000 -> "2". */
static void metrics_seconds(char buf[32], uint64_t ns)
{
	int n = snprintf(buf, 32, "%" PRIu64 ".%09" PRIu64, ns / 1000000000u, ns % 1000000000u);

	while (buf[n - 1] == '0')
		n--;
	if (buf[n - 1] == '.')
		n--;
	buf[n] = '\0';
}

/* Whole seconds since unix ms t, never negative (a clock stepped back). */
static int64_t metrics_lag_s(int64_t t)
{
	int64_t now = acct_now_ms();

	return now > t ? (now - t) / 1000 : 0;
}

static void metrics_hist(struct metrics_out *o, const char *name, const char *help,
                         const struct statsnap_hist *h)
{
	static const uint64_t bounds[STATS_HIST_NBOUNDS] = STATS_HIST_BOUNDS;
	uint64_t cumulative = 0;
	char sec[32];
	int i;

	metrics_head(o, name, "histogram", help);
	for (i = 0; i < STATS_HIST_NBOUNDS; i++) {
		cumulative += h->buckets[i];
		metrics_seconds(sec, bounds[i]);
		metrics_printf(o, "%s_bucket{le=\"%s\"} %" PRIu64 "\n", name, sec, cumulative);
	}
	metrics_seconds(sec, h->sum_ns);
	metrics_printf(o, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n%s_sum %s\n%s_count %" PRIu64 "\n",
	               name, h->count, name, sec, name, h->count);
}

size_t metrics_render(const struct statsnap *s, char *buf, size_t cap)
{
	struct metrics_out o = { .buf = buf, .cap = cap };

	if (cap)
		buf[0] = '\0';
	metrics_counter(&o, "tally_accounting_received_total",
	                "Distinct transactions accepted for accounting.", s->acct.received);
	metrics_counter(&o, "tally_accounting_written_total", "Usage rows committed.", s->acct.written);
	metrics_counter(&o, "tally_accounting_dropped_total",
	                "Usage rows lost: queue and spill full, or a row the store refused.", s->acct.dropped);
	metrics_counter(&o, "tally_accounting_duplicates_total",
	                "Log records for a transaction already accounted.", s->acct.duplicates);
	metrics_counter(&o, "tally_accounting_timed_out_total",
	                "Rows written as no_record: the log record never came.", s->acct.timed_out);
	metrics_counter(&o, "tally_accounting_unpriced_total",
	                "Rows with usage but no prices for their model.", s->acct.unpriced);
	metrics_counter(&o, "tally_accounting_unauthenticated_total",
	                "Records and decisions refused: no gateway secret, not from HAProxy.",
	                s->acct.unauthenticated);
	metrics_counter(&o, "tally_accounting_pending_overflow_total",
	                "Requests refused because the pending table was full.",
	                s->acct.pending_overflow);
	metrics_head(&o, "tally_records_total", "counter", "Log records read, by transport.");
	metrics_printf(&o, "tally_records_total{transport=\"tcp\"} %" PRIu64 "\n"
	               "tally_records_total{transport=\"udp\"} %" PRIu64 "\n"
	               "tally_records_total{transport=\"backlog\"} %" PRIu64 "\n",
	               s->records_tcp, s->records_udp, s->records_backlog);
	metrics_counter(&o, "tally_model_mismatch_total", "Rows whose answer named a model "
	                "other than the one routed to (priced by the routed one).",
	                s->model_mismatches);
	metrics_head(&o, "tally_long_bodies_total", "counter",
	             "Request bodies longer than one SPOP frame sent in pieces (HAProxy 3.4+): "
	             "judged whole, or refused and judged on their first frame.");
	metrics_printf(&o, "tally_long_bodies_total{result=\"whole\"} %" PRIu64 "\n"
	               "tally_long_bodies_total{result=\"refused\"} %" PRIu64 "\n",
	               s->long_bodies_whole, s->long_bodies_refused);
	metrics_gauge(&o, "tally_queue_depth", "Rows waiting for the writer.", (int64_t)s->queue_depth);
	metrics_gauge(&o, "tally_queue_capacity", "Rows the writer queue holds at most.",
	              (int64_t)s->queue_capacity);
	metrics_gauge(&o, "tally_inflight_requests", "Admitted requests waiting for their log record.",
	              (int64_t)s->inflight);
	metrics_gauge(&o, "tally_stored_responses", "Stored responses whose key the agent keeps "
	              "(--stored-responses at most).", (int64_t)s->stored_responses);
	metrics_counter(&o, "tally_writer_batches_total", "Writer transactions committed.",
	                s->batches);
	metrics_gauge(&o, "tally_writer_last_commit_timestamp_seconds", "When the writer last "
	              "committed (unix seconds; 0: not yet): rows queued and an old commit mean "
	              "the store is failing.", s->writer_committed_ms / 1000);
	metrics_gauge(&o, "tally_spilled_rows", "Rows waiting on disk for the store (the queue was "
	              "full or the store failed); written once it works, oldest first.",
	              s->spilled_rows);
	metrics_gauge(&o, "tally_writer_lag_seconds", "How far behind the writer is: age of the "
	              "oldest row waiting on disk (0: none waits).",
	              s->spill_head_ms ? metrics_lag_s(s->spill_head_ms) : 0);
	metrics_hist(&o, "tally_writer_batch_seconds", "Writer transactions, BEGIN to COMMIT.",
	             &s->batch_latency);
	metrics_hist(&o, "tally_decision_seconds", "Time to decide on one request.",
	             &s->decision_latency);
	metrics_counter(&o, "tally_spop_connections_total", "SPOP connections accepted.",
	                s->spop_connections);
	metrics_gauge(&o, "tally_spop_connections_open", "SPOP connections open.",
	              s->spop_connections_open);
	metrics_head(&o, "tally_spop_frames_total", "counter", "SPOP frames, by direction.");
	metrics_printf(&o, "tally_spop_frames_total{direction=\"in\"} %" PRIu64 "\n"
	               "tally_spop_frames_total{direction=\"out\"} %" PRIu64 "\n",
	               s->spop_frames_in, s->spop_frames_out);
	metrics_family(&o, "tally_verdicts_total", "Decisions, by verdict.", "verdict", s->verdicts,
	               DECISION_VERDICT_COUNT, metrics_verdict_name);
	metrics_family(&o, "tally_rows_total", "Usage rows queued, by outcome.", "outcome",
	               s->outcomes, ACCT_OUTCOME_COUNT, metrics_outcome_name);
	metrics_family(&o, "tally_errors_total", "Errors, by kind.", "kind", s->errors,
	               STATS_ERR_COUNT, metrics_error_name);
	return o.len;
}

size_t metrics_render_share(const struct share_stats *s, char *buf, size_t cap)
{
	struct metrics_out o = { .buf = buf, .cap = cap };

	if (cap)
		buf[0] = '\0';
	metrics_counter(&o, "tally_limit_syncs_total", "Shared limits: rounds with the store "
	                "committed (grants leased and returned).", s->syncs);
	metrics_counter(&o, "tally_limit_sync_failures_total", "Shared limits: rounds that "
	                "failed (the store did not answer).", s->failures);
	metrics_counter(&o, "tally_limit_sync_microseconds_total", "Shared limits: time spent "
	                "in committed rounds.", s->sync_us_sum);
	metrics_gauge(&o, "tally_limit_last_sync_microseconds", "Shared limits: the last "
	              "committed round's duration.", s->last_sync_us);
	metrics_counter(&o, "tally_limit_waits_total", "Decisions that waited for a round "
	                "(their key's grant ran out while the cluster had room).", s->waits);
	metrics_counter(&o, "tally_limit_wait_timeouts_total", "Decisions whose wait ended "
	                "before the round did (--lease-wait-ms).", s->wait_timeouts);
	metrics_gauge(&o, "tally_limit_fallback", "1: the store is lost, each limit is "
	              "counted on this node at its share.", s->fallback_nodes > 0);
	metrics_gauge(&o, "tally_limit_nodes", "Nodes holding leases at the last sync.", s->nodes);
	return o.len;
}

void metrics_set_share(struct metrics *m, struct share *s)
{
	m->share = s;
}

/* A label value in the exposition format's escapes: backslash, double quote, newline. */
static void metrics_label(struct metrics_out *o, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			metrics_printf(o, "\\%c", *s);
		else if (*s == '\n')
			metrics_printf(o, "\\n");
		else
			metrics_printf(o, "%c", *s);
	}
}

/* One gauge line of team t: name{team="...",period="..."} v. */
static void metrics_team_line(struct metrics_out *o, const char *name,
                              const struct teamspend_team *t, int64_t v)
{
	metrics_printf(o, "%s{team=\"", name);
	metrics_label(o, t->name);
	metrics_printf(o, "\",period=\"%s\"} %" PRId64 "\n", quota_period_name(t->period), v);
}

size_t metrics_render_teams(const struct teamspend_team *t, size_t n, char *buf, size_t cap)
{
	struct metrics_out o = { .buf = buf, .cap = cap };
	size_t i;

	if (cap)
		buf[0] = '\0';
	if (!n)
		return 0;
	metrics_head(&o, "tally_team_spent_micros", "gauge", "Each team's spend in its budget's "
	             "current period (no budget: this month), reported plus estimated, "
	             "micro-dollars, from the store's rollups.");
	for (i = 0; i < n; i++)
		metrics_team_line(&o, "tally_team_spent_micros", &t[i], t[i].spent_micros);
	metrics_head(&o, "tally_team_budget_micros", "gauge", "Each budgeted team's budget "
	             "for its period, micro-dollars.");
	for (i = 0; i < n; i++)
		if (t[i].budget_micros)
			metrics_team_line(&o, "tally_team_budget_micros", &t[i], t[i].budget_micros);
	metrics_head(&o, "tally_team_budget_left_micros", "gauge", "Each budgeted team's "
	             "budget less its spend in the period (negative: overspent).");
	for (i = 0; i < n; i++)
		if (t[i].budget_micros)
			metrics_team_line(&o, "tally_team_budget_left_micros", &t[i],
			                  t[i].budget_micros - t[i].spent_micros);
	return o.len;
}

void metrics_set_teamspend(struct metrics *m, struct teamspend *ts)
{
	m->teams = ts;
}

/* ---- HTTP ---- */

static int metrics_on_message_begin(http_parser *p)
{
	struct metrics_conn *mc = p->data;

	mc->url_len = 0;
	mc->headers_done = 0;
	return 0;
}

static int metrics_on_url(http_parser *p, const char *at, size_t n)
{
	struct metrics_conn *mc = p->data;

	if (n >= METRICS_URL_MAX - mc->url_len) {
		mc->url_len = METRICS_URL_MAX;
		return 0;
	}
	memcpy(mc->url + mc->url_len, at, n);
	mc->url_len += n;
	return 0;
}

static int metrics_on_headers_complete(http_parser *p)
{
	((struct metrics_conn *)p->data)->headers_done = 1;
	return 0;
}

static int metrics_on_message_complete(http_parser *p)
{
	struct metrics_conn *mc = p->data;

	/* After an Upgrade or CONNECT the bytes that follow are not HTTP. */
	mc->keep_alive = http_should_keep_alive(p) && !p->upgrade;
	http_parser_pause(p, 1);
	return 0;
}

static const http_parser_settings metrics_settings = {
	.on_message_begin = metrics_on_message_begin,
	.on_url = metrics_on_url,
	.on_headers_complete = metrics_on_headers_complete,
	.on_message_complete = metrics_on_message_complete,
};

static void metrics_conn_open(void *state)
{
	struct metrics_conn *mc = state;

	http_parser_init(&mc->parser, HTTP_REQUEST);
	mc->parser.data = mc;
}

static int metrics_is_ours(const struct metrics_conn *mc)
{
	struct http_parser_url u;

	if (mc->url_len >= METRICS_URL_MAX)
		return 0;
	http_parser_url_init(&u);
	if (http_parser_parse_url(mc->url, mc->url_len, 0, &u) != 0 || !(u.field_set & (1 << UF_PATH)))
		return 0;
	return u.field_data[UF_PATH].len == 8 &&
	       memcmp(mc->url + u.field_data[UF_PATH].off, "/metrics", 8) == 0;
}

static const char *metrics_reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 413: return "Content Too Large";
	case 431: return "Request Header Fields Too Large";
	default: return "Internal Server Error";
	}
}

/* Queues one response to a request of used bytes (-1: one not understood, whose
 * connection closes). Returns what the input callback returns: used, or -1 to close. */
static ssize_t metrics_reply(struct adminsrv_conn *c, const struct metrics_conn *mc,
                             ssize_t used, int status, const char *body, size_t len)
{
	const char *type = status == 200 ? "text/plain; version=0.0.4; charset=utf-8"
	                                 : "text/plain; charset=utf-8";
	int keep = used > 0 && mc->keep_alive;
	/* A reply to HEAD announces its body but does not carry it. */
	int head = used > 0 && mc->parser.method == HTTP_HEAD;
	const char *conn = !keep ? "Connection: close\r\n"
	                   : mc->parser.http_minor == 0 ? "Connection: keep-alive\r\n" : "";
	char hdr[256];
	int n = snprintf(hdr, sizeof(hdr),
	                 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s%s\r\n",
	                 status, metrics_reason(status), type, len,
	                 status == 405 ? "Allow: GET\r\n" : "", conn);

	if (adminsrv_write(c, hdr, (size_t)n) < 0 || (!head && adminsrv_write(c, body, len) < 0))
		return -1;
	return keep ? used : -1;
}

static ssize_t metrics_text(struct adminsrv_conn *c, const struct metrics_conn *mc, ssize_t used,
                            int status, const char *text)
{
	return metrics_reply(c, mc, used, status, text, strlen(text));
}

/* Renders the page into m->page; -1 out of memory. */
static int metrics_page(struct metrics *m, size_t *len)
{
	struct statsnap snap;
	struct share_stats sh;
	struct teamspend_team *teams = NULL;
	size_t n, nteams = 0, got;

	statsnap_take(&snap, &stats, m->live);
	if (m->share)
		share_stats(m->share, &sh);
	/* A copy, so that the page renders twice the same; the reload thread may grow it
	 * meanwhile, and the next scrape shows that. */
	if (m->teams && (nteams = teamspend_copy(m->teams, NULL, 0)) > 0) {
		if (!(teams = calloc(nteams, sizeof(*teams))))
			return -1;
		got = teamspend_copy(m->teams, teams, nteams);
		nteams = got < nteams ? got : nteams;
	}
	/* Twice at most: the same snapshots render to the same length. */
	for (;;) {
		char *p;

		n = metrics_render(&snap, m->page, m->page_cap);
		if (m->share)
			n += metrics_render_share(&sh, n < m->page_cap ? m->page + n : NULL,
			                          n < m->page_cap ? m->page_cap - n : 0);
		n += metrics_render_teams(teams, nteams, n < m->page_cap ? m->page + n : NULL,
		                          n < m->page_cap ? m->page_cap - n : 0);
		if (n < m->page_cap)
			break;
		p = realloc(m->page, n + 1);
		if (!p) {
			free(teams);
			return -1;
		}
		m->page = p;
		m->page_cap = n + 1;
	}
	free(teams);
	*len = n;
	return 0;
}

static ssize_t metrics_input(void *arg, struct adminsrv_conn *c, void *state,
                             const unsigned char *in, size_t len)
{
	struct metrics *m = arg;
	struct metrics_conn *mc = state;
	/* The parser never sees more than the limit: an incomplete request that reaches
	 * it is refused, with the status naming the part that was too long. */
	size_t room = METRICS_REQUEST_MAX - mc->req_bytes;
	size_t n = http_parser_execute(&mc->parser, &metrics_settings, (const char *)in,
	                               len < room ? len : room);
	enum http_errno e = HTTP_PARSER_ERRNO(&mc->parser);
	size_t page_len;

	mc->req_bytes += n;
	if (e == HPE_OK && mc->req_bytes == METRICS_REQUEST_MAX)
		return metrics_text(c, mc, -1, mc->headers_done ? 413 : 431, "request too large\n");
	if (e == HPE_OK)
		return (ssize_t)n;
	if (e != HPE_PAUSED)
		return metrics_text(c, mc, -1, 400, "bad request\n");
	http_parser_pause(&mc->parser, 0);
	mc->req_bytes = 0;
	if (!metrics_is_ours(mc))
		return metrics_text(c, mc, (ssize_t)n, 404, "not found\n");
	if (mc->parser.method != HTTP_GET)
		return metrics_text(c, mc, (ssize_t)n, 405, "method not allowed\n");
	if (metrics_page(m, &page_len) < 0) {
		log_error("metrics: out of memory for the page");
		return metrics_text(c, mc, -1, 500, "out of memory\n");
	}
	return metrics_reply(c, mc, (ssize_t)n, 200, m->page, page_len);
}

static const struct adminsrv_proto metrics_proto = {
	.name = "metrics",
	/* http-parser consumes what it is given: this is only the read size. */
	.in_max = 4096,
	.state_size = sizeof(struct metrics_conn),
	.open = metrics_conn_open,
	.input = metrics_input,
};

struct metrics *metrics_start(struct ev_loop *loop, const char *addr,
                              const struct live_view *live, char *err, size_t errlen)
{
	static const struct adminsrv_limits limits = {
		.max_conns = METRICS_MAX_CONNS,
		.timeout = METRICS_TIMEOUT,
	};
	struct metrics *m;
	int fd;

	/* net_listen would take a unix socket, which metrics_stop would leave behind. */
	if (strncmp(addr, "unix:", 5) == 0) {
		snprintf(err, errlen, "metrics: listen address must be host:port, not %s", addr);
		return NULL;
	}
	if ((fd = net_listen(addr, err, errlen)) < 0)
		return NULL;
	if ((m = calloc(1, sizeof(*m))))
		m->live = live;
	if (!m || !(m->srv = adminsrv_start(loop, fd, &metrics_proto, m, &limits))) {
		snprintf(err, errlen, "metrics: out of memory");
		free(m);
		close(fd);
		return NULL;
	}
	log_info("metrics: serving http://%s/metrics", addr);
	return m;
}

void metrics_stop(struct metrics *m)
{
	adminsrv_stop(m->srv);
	free(m->page);
	free(m);
}
