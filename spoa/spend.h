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
struct db_stmt;

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

/* A model budget's spend (?1 model_budgets.id): spend_model_names_sql reads the models
 * its owner budgets, spend_key_model_sql (a key's: usage_daily) or spend_team_model_sql
 * (a team's: team_model_daily) what the owner spent on each model since a day (?2 unix
 * seconds). spend_model_sum runs names and rows, one of the two, for budget_id of model
 * since since_s, and sums into *out the rows that count against that budget by
 * keytable_model_budget's rule; it leaves both reset. 0, or -1 if the store failed or
 * memory ran out. */
extern const char spend_model_names_sql[];
extern const char spend_key_model_sql[];
extern const char spend_team_model_sql[];
int spend_model_sum(struct db_stmt *names, struct db_stmt *rows, int64_t budget_id,
                    const char *model, int64_t since_s, int64_t *out);

/* For each key, team, tag, model budget and end user of kt with a budget: its spend (reported plus
 * estimated cost) in the period containing now_ms (unix ms), summed from the rollups (a
 * team's: the rows made under it, team_hourly; a model budget's: above; a tag's: the
 * rows carrying it, tag_total_daily; an end user's: its key's rows naming it, end_user_daily; periods start on
 * a UTC day), handed to quota_set_spent. Rows still queued are missing from it for a
 * moment; quota_set_spent only raises a spend it is counting already. 0, or -1 with a
 * message in err. */
int spend_seed(struct db *db, const struct keytable *kt, struct quota *q, int64_t now_ms,
               char *err, size_t errlen);

#endif
