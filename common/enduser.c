/* enduser: the one rule of what an end user's id is (see enduser.h). Pure; any thread. */
#include "enduser.h"

int enduser_id_ok(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;

	if (n == 0 || n >= ENDUSER_ID_MAX)
		return 0;
	while (i < n) {
		unsigned c = p[i], cp, min, k, len;

		len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3
		    : (c & 0xf8) == 0xf0 ? 4 : 0;
		if (len == 0 || n - i < len)
			return 0;
		cp = len == 1 ? c : c & (0x7f >> len);
		for (k = 1; k < len; k++) {
			if ((p[i + k] & 0xc0) != 0x80)
				return 0;
			cp = cp << 6 | (p[i + k] & 0x3f);
		}
		min = len == 1 ? 0 : len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) || cp < 0x20 ||
		    (cp >= 0x7f && cp <= 0x9f))
			return 0;
		i += len;
	}
	return 1;
}
