/* probe: a thread's time for store reads on a decision's way (see probe.h). Pure. */
#include "probe.h"

#include <time.h>

static _Thread_local struct probe_budget probe_mine;

struct probe_budget *probe_thread_budget(void)
{
	return &probe_mine;
}

int probe_budget_allows(struct probe_budget *b, int64_t now_us)
{
	/* Whole microseconds of budget per elapsed time, the rest of the time kept for the
	 * next call: called for every miss, a per-call rounding would lose all refill. */
	const int64_t per = 1000000 / PROBE_US;
	int64_t gained;

	if (!b->at_us) {
		b->left_us = PROBE_US;
		b->at_us = now_us;
	}
	if (now_us > b->at_us) {
		gained = (now_us - b->at_us) / per;
		b->at_us += gained * per;
		if (b->left_us + gained >= PROBE_US) {
			b->left_us = PROBE_US;
			b->at_us = now_us;
		} else {
			b->left_us += gained;
		}
	}
	return b->left_us > 0;
}

void probe_budget_spend(struct probe_budget *b, int64_t us)
{
	b->left_us -= us > 0 ? us : 0;
}

int64_t probe_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
