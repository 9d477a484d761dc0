/* teamspend: what each team spent in its budget's current period (a team without a
 * budget: the calendar month), as the store's rollups hold it (team_hourly, every
 * node's rows), for the Prometheus gauges of metrics.c. The reload thread refreshes it
 * every TEAMSPEND_INTERVAL_MS and when teams change; the metrics server (main thread)
 * takes copies. Thread-safe.
 *
 * Why the store and not the limits' own counts (quota.c): on several nodes each agent
 * counts only its own grants, while the rollups hold the cluster's spend, the figure
 * queryd shows; they lag the rows still queued by the writers (well under a second)
 * and the interval. */
#ifndef TALLY_TEAMSPEND_H
#define TALLY_TEAMSPEND_H

#include <stddef.h>
#include <stdint.h>

#include "quota.h"

#define TEAMSPEND_INTERVAL_MS 5000

struct db;
struct keytable;
struct teamspend;

/* One team's figures. */
struct teamspend_team {
	char name[128];               /* cut to fit; labels are escaped when rendered */
	enum quota_period period;     /* its budget's; no budget: QUOTA_PERIOD_MONTH */
	int64_t budget_micros;        /* 0: none */
	int64_t spent_micros;         /* reported plus estimated, in the period */
};

struct teamspend *teamspend_new(void);
void teamspend_free(struct teamspend *ts);

/* Reads every team of kt's spend at now_ms from db and replaces the figures. 0, or -1
 * (the figures kept) with a message in err. */
int teamspend_refresh(struct teamspend *ts, struct db *db, const struct keytable *kt,
                      int64_t now_ms, char *err, size_t errlen);

/* A copy of the figures into out (capacity cap); returns how many there are, which
 * may exceed cap (then only cap were copied). */
size_t teamspend_copy(struct teamspend *ts, struct teamspend_team *out, size_t cap);

#endif
