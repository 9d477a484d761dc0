/* modelbudgets: the modelbudget commands (set, list, delete): a key's or a team's budget
 * for one model, beside its budget for every model. tallyctl is single-threaded. */
#ifndef TALLY_MODELBUDGETS_H
#define TALLY_MODELBUDGETS_H

#include "ctl.h"

int modelbudgets_set(struct ctl *ctl, const struct ctl_args *a);
int modelbudgets_list(struct ctl *ctl, const struct ctl_args *a);
int modelbudgets_delete(struct ctl *ctl, const struct ctl_args *a);

#endif
