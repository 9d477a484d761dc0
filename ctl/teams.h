/* teams: the team commands (create, set, list, delete), and the lookup of a team by
 * name and the check of a key's fixed tags with its team's that key create and key set
 * use. tallyctl is single-threaded. */
#ifndef TALLY_TEAMS_H
#define TALLY_TEAMS_H

#include <stdint.h>

#include "ctl.h"

int teams_id(struct ctl *ctl, const char *name, int64_t *id);
/* Fails, naming it and its team, if active key key_id's fixed tags with its team's are
 * more than TAGS_MAX (a request carries at most that many): the agent would refuse all
 * of its requests. Runs after the write, inside the writing transaction. */
int teams_check_key_tags(struct ctl *ctl, int64_t key_id);
int teams_create(struct ctl *ctl, const struct ctl_args *a);
int teams_set(struct ctl *ctl, const struct ctl_args *a);
int teams_list(struct ctl *ctl, const struct ctl_args *a);
int teams_delete(struct ctl *ctl, const struct ctl_args *a);

#endif
