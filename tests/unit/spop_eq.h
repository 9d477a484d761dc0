/* Equality of decoded SPOP values, for the codec's unit tests and fuzz target.
 * Header-only so that each test binary stays one file. */
#ifndef TALLY_TEST_SPOP_EQ_H
#define TALLY_TEST_SPOP_EQ_H

#include <string.h>

#include "spop-t.h"

static inline int spop_str_eq(struct spop_str a, struct spop_str b)
{
	return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

static inline int spop_data_eq(const struct spop_data *a, const struct spop_data *b)
{
	if (a->type != b->type)
		return 0;
	switch (a->type) {
	case SPOP_DATA_NULL:   return 1;
	case SPOP_DATA_BOOL:   return !a->u.b == !b->u.b;
	case SPOP_DATA_INT32:  return a->u.i32 == b->u.i32;
	case SPOP_DATA_UINT32: return a->u.u32 == b->u.u32;
	case SPOP_DATA_INT64:  return a->u.i64 == b->u.i64;
	case SPOP_DATA_UINT64: return a->u.u64 == b->u.u64;
	case SPOP_DATA_IPV4:   return memcmp(a->u.ip, b->u.ip, 4) == 0;
	case SPOP_DATA_IPV6:   return memcmp(a->u.ip, b->u.ip, 16) == 0;
	case SPOP_DATA_STR:
	case SPOP_DATA_BIN:    return spop_str_eq(a->u.str, b->u.str);
	}
	return 0;
}

#endif
