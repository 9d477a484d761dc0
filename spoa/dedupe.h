/* dedupe: request ids seen recently, so that the second copy of a record (ring and UDP
 * both deliver each one) is counted as a duplicate instead of becoming a second row.
 * Ids are kept as 64-bit hashes for window_ms after they were added. One thread (the
 * intake thread). */
#ifndef TALLY_DEDUPE_H
#define TALLY_DEDUPE_H

#include <stdint.h>

struct dedupe;

struct dedupe *dedupe_new(int64_t window_ms);
void dedupe_free(struct dedupe *d);

/* 1 if id was added within the window, else 0. */
int dedupe_seen(struct dedupe *d, const char *id);

/* Remembers id from now_ms (unix ms). -1 on ENOMEM (then id is simply not remembered). */
int dedupe_add(struct dedupe *d, const char *id, int64_t now_ms);

/* Forgets ids added before now_ms - window_ms. */
void dedupe_expire(struct dedupe *d, int64_t now_ms);

#endif
