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

/* The kind a budget's period is stored as (budget_period: day, week, month, total) in
 * *k; -1 for another name. */
int period_kind_parse(const char *name, enum period_kind *k);

/* Days since 1970-01-01 of a proleptic Gregorian date (month 1..12, day 1..31), and the
 * year and month of such a day: the calendar tz.c lays its zones' rules on. */
int64_t period_days_from_civil(int64_t y, int64_t m, int64_t d);
void period_civil_from_days(int64_t z, int64_t *y, int64_t *m);
int64_t period_floor_div(int64_t a, int64_t b);

#endif
