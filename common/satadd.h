/* satadd: the saturating sum of usage figures. Token counts and costs are bounded per
 * row, but sums of absurd ones could wrap, which is undefined and would show a
 * negative spend. Pure, any thread. */
#ifndef TALLY_SATADD_H
#define TALLY_SATADD_H

#include <stdint.h>

static inline int64_t satadd(int64_t a, int64_t b)
{
	int64_t s;

	if (__builtin_add_overflow(a, b, &s))
		return b < 0 ? INT64_MIN : INT64_MAX;
	return s;
}

#endif
