/* period: UTC calendar arithmetic (see period.h). */
#include "period.h"

#include <string.h>

/* H. Hinnant's days_from_civil. */
int64_t period_days_from_civil(int64_t y, int64_t m, int64_t d)
{
	int64_t era, yoe, doy;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
	return era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
}

/* civil_from_days. */
void period_civil_from_days(int64_t z, int64_t *y, int64_t *m)
{
	int64_t era, doe, yoe, doy, mp;

	z += 719468;
	era = (z >= 0 ? z : z - 146096) / 146097;
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	*m = mp < 10 ? mp + 3 : mp - 9;
	*y = yoe + era * 400 + (*m <= 2);
}

int64_t period_floor_div(int64_t a, int64_t b)
{
	return a / b - (a % b < 0);
}

/* The start of the period containing ms, moved forward by next periods. */
static int64_t period_boundary(enum period_kind k, int64_t ms, int next)
{
	int64_t day, y, m;

	if (k == PERIOD_HOUR)
		return (period_floor_div(ms, PERIOD_HOUR_MS) + next) * PERIOD_HOUR_MS;
	day = period_floor_div(ms, PERIOD_DAY_MS);
	if (k == PERIOD_DAY)
		return (day + next) * PERIOD_DAY_MS;
	if (k == PERIOD_WEEK) {
		/* 1970-01-01 was a Thursday, day 3 of its week. */
		int64_t monday = day - (day + 3 - period_floor_div(day + 3, 7) * 7);

		return (monday + 7 * next) * PERIOD_DAY_MS;
	}
	period_civil_from_days(day, &y, &m);
	m += next;
	if (m > 12) {
		m -= 12;
		y++;
	}
	return period_days_from_civil(y, m, 1) * PERIOD_DAY_MS;
}

int64_t period_start_ms(enum period_kind k, int64_t ms)
{
	return k == PERIOD_TOTAL ? 0 : period_boundary(k, ms, 0);
}

int64_t period_end_ms(enum period_kind k, int64_t ms)
{
	return k == PERIOD_TOTAL ? INT64_MAX : period_boundary(k, ms, 1);
}

int period_kind_parse(const char *name, enum period_kind *k)
{
	static const struct { const char *name; enum period_kind k; } kinds[] = {
		{ "day", PERIOD_DAY }, { "week", PERIOD_WEEK }, { "month", PERIOD_MONTH },
		{ "total", PERIOD_TOTAL },
	};

	for (size_t i = 0; name && i < sizeof(kinds) / sizeof(kinds[0]); i++)
		if (strcmp(name, kinds[i].name) == 0) {
			*k = kinds[i].k;
			return 0;
		}
	return -1;
}
