/* period: UTC calendar periods (hours, days, weeks, months) computed from unix
 * milliseconds alone, with no time zone or libc state: the one rule by which the agent's
 * budgets, the writer's rollups and queryd's "this day", "this week" and "this month"
 * agree. Pure, any thread. */
#ifndef TALLY_PERIOD_H
#define TALLY_PERIOD_H

#include <stdint.h>

/* A week begins on Monday at 00:00 UTC (ISO 8601). */
enum period_kind { PERIOD_HOUR, PERIOD_DAY, PERIOD_WEEK, PERIOD_MONTH, PERIOD_TOTAL };

#define PERIOD_HOUR_MS 3600000
#define PERIOD_DAY_MS  86400000

/* The start of the period of kind k containing ms (PERIOD_TOTAL: 0), and its end (the
 * next one's start; PERIOD_TOTAL: INT64_MAX). Negative times floor too. */
int64_t period_start_ms(enum period_kind k, int64_t ms);
int64_t period_end_ms(enum period_kind k, int64_t ms);

#endif
