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

const char *tier_list_next(const char **list, size_t *len)
{
	const char *name = *list, *comma;

	if (!name)
		return NULL;
	comma = strchr(name, ',');
	*len = comma ? (size_t)(comma - name) : strlen(name);
	*list = comma ? comma + 1 : NULL;
	return name;
}

int tier_list_ok(const char *list)
{
	const char *name;
	size_t len;

	/* An empty name (a trailing comma, "") is none. */
	while ((name = tier_list_next(&list, &len)))
		if (!tier_name_ok(name, len))
			return 0;
	return 1;
}
