/* tier: service tier names (see tier.h). */
#include "tier.h"

#include <string.h>

int tier_name_ok(const char *s, size_t n)
{
	size_t i;

	if (n == 0 || n >= TIER_NAME_MAX)
		return 0;
	for (i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_' ||
		      s[i] == '-'))
			return 0;
	return 1;
}

int tier_list_ok(const char *list)
{
	for (;;) {
		const char *comma = strchr(list, ',');

		if (!tier_name_ok(list, comma ? (size_t)(comma - list) : strlen(list)))
			return 0;
		if (!comma)
			return 1;
		list = comma + 1;
	}
}
