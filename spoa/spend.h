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

/* What a key's rows (spend_key_sql), a team's (spend_team_sql) and a tag budget's tag's
 * (spend_tag_sql, by tag_budgets.id; since a day) were charged since an hour: ?1 the id,
 * ?2 unix seconds. The seed of one node's limits here, and of the cluster's budget pools
 * (share.c). */
extern const char spend_key_sql[];
extern const char spend_team_sql[];
extern const char spend_tag_sql[];
/* An end user's, by its key and id (?1 keys.id, ?2 unix seconds of a day, ?3 the id). */
extern const char spend_end_user_sql[];

/* For each key, team, tag and end user of kt with a budget: its spend (reported plus
 * estimated cost) in the period containing now_ms (unix ms), summed from the rollups (a
 * team's: the rows made under it, team_hourly; a tag's: the rows carrying it,
 * tag_daily; an end user's: its key's rows naming it, end_user_daily; periods start on
 * a UTC day), handed to quota_set_spent. Rows still queued are missing from it for a
 * moment; quota_set_spent only raises a spend it is counting already. 0, or -1 with a
 * message in err. */
int spend_seed(struct db *db, const struct keytable *kt, struct quota *q, int64_t now_ms,
               char *err, size_t errlen);

#endif
