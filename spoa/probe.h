/* probe: a thread's time for reading the store on the way of a decision (owner.c's
 * stored responses, usageview.c's spend). An I/O thread that reads the store waits on
 * it: each thread gets PROBE_US of every second for all such reads together, saved up
 * to one second's worth, and a read that overruns (a connect to a store that hangs
 * included) is paid back before the next. The budget's arithmetic is pure; each
 * thread has its own (probe_thread_budget). */
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
/* The calling thread's budget, shared by every store read it makes on a decision's
 * way. */
struct probe_budget *probe_thread_budget(void);
/* Microseconds of CLOCK_MONOTONIC. */
int64_t probe_now_us(void);

#endif
