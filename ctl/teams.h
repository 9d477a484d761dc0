/* teams: the team commands (create, set, list, delete) and the lookup of a team by
 * name that key create and key set use. tallyctl is single-threaded. */
#ifndef TALLY_TEAMS_H
#define TALLY_TEAMS_H

#include <stdint.h>

#include "ctl.h"

int teams_id(struct ctl *ctl, const char *name, int64_t *id);
int teams_create(struct ctl *ctl, const struct ctl_args *a);
int teams_set(struct ctl *ctl, const struct ctl_args *a);
int teams_list(struct ctl *ctl, const struct ctl_args *a);
int teams_delete(struct ctl *ctl, const struct ctl_args *a);

#endif
