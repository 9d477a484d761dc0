/* probe: a thread's time for reading the store on the way of a decision (owner.c's
 * stored responses, usageview.c's spend). An I/O thread that reads the store waits on
 * it: each thread gets PROBE_US of every second, saved up to one second's worth, and
 * a probe that overruns is paid back before the next. Pure; one thread. */
#ifndef TALLY_PROBE_H
#define TALLY_PROBE_H

#include <stdint.h>

#define PROBE_US 50000

struct probe_budget {
	int64_t left_us;
	int64_t at_us;      /* last refilled (a monotonic clock); 0: never */
};

/* Refills b for the time since its last call (now_us, microseconds of a monotonic
 * clock, > 0), then whether time is left. */
int probe_budget_allows(struct probe_budget *b, int64_t now_us);
/* Takes a probe's time (us) from b: it may go below 0, then waits for the refill. */
void probe_budget_spend(struct probe_budget *b, int64_t us);
/* Microseconds of CLOCK_MONOTONIC. */
int64_t probe_now_us(void);

#endif
