/* mpcheck: a bounds walk over msgpack bytes before msgpack-c unpacks them (see
 * mpcheck.h). Pure; any thread. */
#include "mpcheck.h"

#include <stdint.h>

enum { MP_DATA, MP_ARRAY, MP_MAP };

/* For type bytes 0xc4..0xdf: bytes of the length field, bytes that always follow it,
 * and what the length counts. */
static const struct {
	unsigned char len_bytes, extra, kind;
} mpcheck_types[0xe0 - 0xc4] = {
	[0xc4 - 0xc4] = { 1, 0, MP_DATA }, [0xc5 - 0xc4] = { 2, 0, MP_DATA },   /* bin */
	[0xc6 - 0xc4] = { 4, 0, MP_DATA },
	[0xc7 - 0xc4] = { 1, 1, MP_DATA }, [0xc8 - 0xc4] = { 2, 1, MP_DATA },   /* ext */
	[0xc9 - 0xc4] = { 4, 1, MP_DATA },
	[0xca - 0xc4] = { 0, 4, MP_DATA }, [0xcb - 0xc4] = { 0, 8, MP_DATA },   /* float */
	[0xcc - 0xc4] = { 0, 1, MP_DATA }, [0xcd - 0xc4] = { 0, 2, MP_DATA },   /* uint */
	[0xce - 0xc4] = { 0, 4, MP_DATA }, [0xcf - 0xc4] = { 0, 8, MP_DATA },
	[0xd0 - 0xc4] = { 0, 1, MP_DATA }, [0xd1 - 0xc4] = { 0, 2, MP_DATA },   /* int */
	[0xd2 - 0xc4] = { 0, 4, MP_DATA }, [0xd3 - 0xc4] = { 0, 8, MP_DATA },
	[0xd4 - 0xc4] = { 0, 2, MP_DATA }, [0xd5 - 0xc4] = { 0, 3, MP_DATA },   /* fixext */
	[0xd6 - 0xc4] = { 0, 5, MP_DATA }, [0xd7 - 0xc4] = { 0, 9, MP_DATA },
	[0xd8 - 0xc4] = { 0, 17, MP_DATA },
	[0xd9 - 0xc4] = { 1, 0, MP_DATA }, [0xda - 0xc4] = { 2, 0, MP_DATA },   /* str */
	[0xdb - 0xc4] = { 4, 0, MP_DATA },
	[0xdc - 0xc4] = { 2, 0, MP_ARRAY }, [0xdd - 0xc4] = { 4, 0, MP_ARRAY },
	[0xde - 0xc4] = { 2, 0, MP_MAP }, [0xdf - 0xc4] = { 4, 0, MP_MAP },
};

int mpcheck_bounded(const unsigned char *p, const unsigned char *end)
{
	uint64_t pending = 1;

	while (pending > 0) {
		uint64_t skip = 0, children = 0, n = 0;
		unsigned char b;
		int i;

		if (p == end)
			return -1;
		b = *p++;
		pending--;
		if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
			/* fixint, nil, false, true: the type byte is all */
		} else if (b <= 0x8f) {
			children = 2u * (b & 0x0f);
		} else if (b <= 0x9f) {
			children = b & 0x0f;
		} else if (b <= 0xbf) {
			skip = b & 0x1f;
		} else if (b == 0xc1) {
			return -1;                           /* never used */
		} else {
			int len_bytes = mpcheck_types[b - 0xc4].len_bytes;

			if (end - p < len_bytes)
				return -1;
			for (i = 0; i < len_bytes; i++)
				n = n << 8 | *p++;
			skip = mpcheck_types[b - 0xc4].extra;
			if (mpcheck_types[b - 0xc4].kind == MP_DATA)
				skip += n;
			else
				children = mpcheck_types[b - 0xc4].kind == MP_MAP ? 2 * n : n;
		}
		if (skip > (uint64_t)(end - p))
			return -1;
		p += skip;
		pending += children;
		if (pending > (uint64_t)(end - p))
			return -1;
	}
	return 0;
}
