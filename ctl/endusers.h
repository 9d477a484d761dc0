/* endusers: the enduser commands (set, list, delete): the limits of the end users a
 * key's requests name, set on a key or a team. tallyctl is single-threaded. */
#ifndef TALLY_ENDUSERS_H
#define TALLY_ENDUSERS_H

#include "ctl.h"

int endusers_set(struct ctl *ctl, const struct ctl_args *a);
int endusers_list(struct ctl *ctl, const struct ctl_args *a);
int endusers_delete(struct ctl *ctl, const struct ctl_args *a);

#endif
