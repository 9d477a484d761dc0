/* tier: the names of service tiers ("default", "priority", "flex", Anthropic's
 * "standard"), as providers report them, requests ask for them, rate cards and keys'
 * lists hold them (docs/pricing.md). The one rule for all of them: the agent, tallyctl
 * and the schema's readers take the same names. Pure; any thread. */
#ifndef TALLY_TIER_H
#define TALLY_TIER_H

#include <stddef.h>

/* Bytes a name may take, its NUL included. */
#define TIER_NAME_MAX 24

/* Whether s (n bytes) is a tier's name: 1 to TIER_NAME_MAX - 1 bytes of [a-z0-9_-]. */
int tier_name_ok(const char *s, size_t n);

/* Whether list (NUL-terminated) is names separated by single commas, as keys'
 * service_tiers and the agent's --service-tiers hold them; "" is no list. */
int tier_list_ok(const char *list);

/* Walks such a list: returns the name at *list (*len bytes, possibly 0) and moves *list
 * past it and its comma, to NULL after the last; NULL once *list is NULL. */
const char *tier_list_next(const char **list, size_t *len);

#endif
