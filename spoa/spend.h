/* spend: what each budgeted key spent so far in its current budget period, read from
 * the store into the limits (quota.h), so that a budget survives a restart and a
 * budget set while running counts what the key spent before. Main thread at start,
 * then the reload thread, on the main connection. */
#ifndef TALLY_SPEND_H
#define TALLY_SPEND_H

#include <stddef.h>
#include <stdint.h>

#include "keytable-t.h"

struct db;

struct quota;

/* For each key of kt with a budget: its spend (reported plus estimated cost) in the
 * period containing now_ms (unix ms), summed from the hourly rollups (periods start
 * on the hour), handed to quota_set_spent. Rows still queued are missing from it for a
 * moment; quota_set_spent only raises a spend it is counting already. 0, or -1 with a
 * message in err. */
int spend_seed(struct db *db, const struct keytable *kt, struct quota *q, int64_t now_ms,
               char *err, size_t errlen);

#endif
