/* tz: time zones as the system's TZif files (RFC 8536) state them, for budget periods
 * that begin at a key's or team's local midnight (docs/limits.md, "Time zones"). The
 * one rule by which the agent, tallyctl and queryd place a zoned period: every node
 * reads the zone from its own tzdata, so nodes agree as long as their tzdata does.
 * Parsing and arithmetic are pure (any thread); tz_get reads files and keeps what it
 * read until the process exits. */
#ifndef TALLY_TZ_H
#define TALLY_TZ_H

#include <stddef.h>
#include <stdint.h>

#include "period.h"

/* Bytes of a zone's name (e.g. America/Argentina/Buenos_Aires), NUL excluded. */
#define TZ_NAME_MAX 64
/* Bytes of a TZif file read: the largest of Debian's is under 4 KiB. */
#define TZ_FILE_MAX 65536

struct tz;

/* 1 if name may name a zone: 1 to TZ_NAME_MAX bytes of [A-Za-z0-9_+-./], no
 * component empty, "." or "..", not starting with '/' or '.': a path below the zone
 * directory and nothing else. "UTC" is a name like the others. */
int tz_name_ok(const char *name);

/* Parses a TZif file of version 2 or later in buf[0..len) (its 64-bit part and its
 * footer; files with leap seconds are refused: periods count POSIX time). Returns the
 * zone (free with tz_free), or NULL if the bytes are not such a file or memory ran out. */
struct tz *tz_parse(const unsigned char *buf, size_t len);
void tz_free(struct tz *z);

/* The zone named name (tz_name_ok), read from $TZDIR or /usr/share/zoneinfo. The
 * result lives until the process exits; a file that changed since it was read (tzdata
 * upgraded) is read again and the new zone returned. NULL with a message in err if the
 * name is refused, no such zone exists or its file is not a TZif file. Any thread. */
const struct tz *tz_get(const char *name, char *err, size_t errlen);

/* The zone's name as tz_get was given it. */
const char *tz_name(const struct tz *z);

/* Seconds east of UTC of local time in z at utc_s (unix seconds). */
int32_t tz_offset(const struct tz *z, int64_t utc_s);

/* The period of kind k containing ms (unix milliseconds) in zone z (NULL: UTC, as
 * period.h): it begins at the first instant whose local time is the period's first
 * (local midnight; where a change of offset skips midnight, the instant of the change),
 * and ends where the next begins. Consecutive periods tile time: start <= ms < end, and
 * the end of one is the start of the next. PERIOD_TOTAL: 0 and INT64_MAX. */
int64_t tz_period_start_ms(const struct tz *z, enum period_kind k, int64_t ms);
int64_t tz_period_end_ms(const struct tz *z, enum period_kind k, int64_t ms);

#endif
