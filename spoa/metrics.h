/* metrics: Prometheus text exposition (format 0.0.4) of the agent's counters and live
 * figures over HTTP/1.1, GET /metrics. Runs on the main thread's libev loop.
 *
 * The metric names are a contract (dashboards and alerts use them): see metrics.c. */
#ifndef TALLY_METRICS_H
#define TALLY_METRICS_H

#include <ev.h>
#include <stddef.h>

#include "live-t.h"
#include "statsnap.h"

#define METRICS_REQUEST_MAX 8192     /* bytes of one request, headers and body */
#define METRICS_MAX_CONNS   64
#define METRICS_TIMEOUT     5.0      /* seconds a client has, from connecting or from its
                                      * last reply, to send a whole request */

struct metrics;

/* Listens on addr ("host:port", "[v6]:port") and serves the page from the process
 * counters (stats) and live, which must outlive the listener. NULL with err set. */
struct metrics *metrics_start(struct ev_loop *loop, const char *addr,
                              const struct live_view *live, char *err, size_t errlen);

/* Closes the listener and its connections; frees m. */
void metrics_stop(struct metrics *m);

/* Renders the page for s into buf like snprintf: writes at most cap bytes, NUL
 * included, and returns the length of the whole page. Pure. */
size_t metrics_render(const struct statsnap *s, char *buf, size_t cap);

/* The same for the shared limits' figures (share.h), appended to the page once
 * metrics_set_share gave it the share thread. */
struct share;
struct share_stats;
size_t metrics_render_share(const struct share_stats *s, char *buf, size_t cap);
void metrics_set_share(struct metrics *m, struct share *s);

/* The same for the teams' spend gauges (teamspend.h), appended once
 * metrics_set_teamspend gave it the figures: tally_team_spent_micros and, for a team
 * with a budget, tally_team_budget_micros and tally_team_budget_left_micros (negative
 * when overspent), labelled by team and period. Per team, never per end user: the
 * operator bounds the teams. */
struct teamspend;
struct teamspend_team;
size_t metrics_render_teams(const struct teamspend_team *t, size_t n, char *buf, size_t cap);
void metrics_set_teamspend(struct metrics *m, struct teamspend *ts);

#endif
