/* spend: what each budgeted key and team spent so far in its current budget period,
 * read from the store into the limits (quota.h), so that a budget survives a restart
 * and a budget set while running counts what the key or team spent before. Main thread at start,
 * then the reload thread, on the main connection. */
#ifndef TALLY_SPEND_H
#define TALLY_SPEND_H

#include <stddef.h>
#include <stdint.h>

#include "keytable-t.h"

struct db;

struct quota;

/* What a key's rows (spend_key_sql) and a team's (spend_team_sql) were charged since an
 * hour: ?1 the id, ?2 unix seconds. The seed of one node's limits here, and of the
 * cluster's budget pools (share.c). */
extern const char spend_key_sql[];
extern const char spend_team_sql[];

/* For each key and team of kt with a budget: its spend (reported plus estimated cost)
 * in the period containing now_ms (unix ms), summed from the hourly rollups (a team's:
 * the rows made under it, team_hourly; periods start
 * on the hour), handed to quota_set_spent. Rows still queued are missing from it for a
 * moment; quota_set_spent only raises a spend it is counting already. 0, or -1 with a
 * message in err. */
int spend_seed(struct db *db, const struct keytable *kt, struct quota *q, int64_t now_ms,
               char *err, size_t errlen);

#endif
