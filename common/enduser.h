/* enduser: what an end user's id is (docs/limits.md, "End users"): the agent takes it
 * from a request, tallyctl from the operator for end users' limits, by one rule. Pure;
 * any thread. */
#ifndef TALLY_ENDUSER_H
#define TALLY_ENDUSER_H

#include <stddef.h>

/* The bytes of an id, its terminator included: Claude Code's metadata.user_id runs to
 * ~190 characters. */
#define ENDUSER_ID_MAX 257

/* Whether s (n bytes) can be an end user's id the gateway stores and counts: 1 to
 * ENDUSER_ID_MAX - 1 bytes of UTF-8 (shortest forms, no surrogates) without a control
 * character (C0, DEL, C1). Spaces, quotes and any letters pass: ids are what clients
 * already send as OpenAI's user (names, e-mail addresses, JSON), compared byte for byte,
 * and escaped where they are printed. */
int enduser_id_ok(const char *s, size_t n);

#endif
