/* counters: the accounting counters (see counters.h). Any thread. */
#include "counters.h"

#include <assert.h>
#include <stdatomic.h>

static struct {
	atomic_uint_fast64_t received, written, dropped, duplicates, timed_out, unpriced;
	atomic_uint_fast64_t unauthenticated, pending_overflow;
} counters_live;

static void counters_add(atomic_uint_fast64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

static uint64_t counters_get(atomic_uint_fast64_t *c)
{
	return atomic_load_explicit(c, memory_order_relaxed);
}

/* Resolving a row (written, dropped) releases what happened before it, the row's
 * counting in received included (same thread, or handed over through the queue's
 * mutex); counters_now acquires them, so its later read of received sees that count. */
static void counters_resolve(atomic_uint_fast64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_release);
}

static uint64_t counters_get_resolved(atomic_uint_fast64_t *c)
{
	return atomic_load_explicit(c, memory_order_acquire);
}

void counters_receive(void)
{
	counters_add(&counters_live.received, 1);
}

void counters_repeat(void)
{
	counters_add(&counters_live.duplicates, 1);
}

void counters_drop(uint64_t n)
{
	counters_resolve(&counters_live.dropped, n);
}

void counters_refuse_unauthenticated(void)
{
	counters_add(&counters_live.unauthenticated, 1);
}

void counters_refuse_overflow(void)
{
	counters_add(&counters_live.pending_overflow, 1);
}

void counters_apply(struct counters *c, const struct counters *d)
{
	assert(d->received == 0 && d->unauthenticated == 0 && d->pending_overflow == 0);
	c->received -= d->duplicates;
	c->duplicates += d->duplicates;
	c->written += d->written;
	c->dropped += d->dropped;
	c->timed_out += d->timed_out;
	c->unpriced += d->unpriced;
}

void counters_settle(const struct counters *d)
{
	assert(d->received == 0 && d->unauthenticated == 0 && d->pending_overflow == 0);
	/* Resolved first, then received: a reader (counters_now) never sees a row resolved
	 * twice over. */
	counters_resolve(&counters_live.written, d->written);
	counters_resolve(&counters_live.dropped, d->dropped);
	counters_add(&counters_live.timed_out, d->timed_out);
	counters_add(&counters_live.unpriced, d->unpriced);
	counters_add(&counters_live.duplicates, d->duplicates);
	atomic_fetch_sub_explicit(&counters_live.received, d->duplicates, memory_order_relaxed);
}

struct counters counters_now(void)
{
	struct counters c;

	c.dropped = counters_get_resolved(&counters_live.dropped);
	c.written = counters_get_resolved(&counters_live.written);
	c.received = counters_get(&counters_live.received);
	c.duplicates = counters_get(&counters_live.duplicates);
	c.timed_out = counters_get(&counters_live.timed_out);
	c.unpriced = counters_get(&counters_live.unpriced);
	c.unauthenticated = counters_get(&counters_live.unauthenticated);
	c.pending_overflow = counters_get(&counters_live.pending_overflow);
	return c;
}

void counters_set(const struct counters *c)
{
	atomic_store(&counters_live.received, c->received);
	atomic_store(&counters_live.written, c->written);
	atomic_store(&counters_live.dropped, c->dropped);
	atomic_store(&counters_live.duplicates, c->duplicates);
	atomic_store(&counters_live.timed_out, c->timed_out);
	atomic_store(&counters_live.unpriced, c->unpriced);
	atomic_store(&counters_live.unauthenticated, c->unauthenticated);
	atomic_store(&counters_live.pending_overflow, c->pending_overflow);
}

int64_t counters_recover(struct counters *c)
{
	int64_t lost = (int64_t)(c->received - c->written - c->dropped);

	c->received = c->written + c->dropped;
	return lost;
}
