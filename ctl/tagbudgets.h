/* tagbudgets: the tag commands (set, list, delete): budgets of one tag each, spent by
 * every key's requests carrying it. tallyctl is single-threaded. */
#ifndef TALLY_TAGBUDGETS_H
#define TALLY_TAGBUDGETS_H

#include "ctl.h"

int tagbudgets_set(struct ctl *ctl, const struct ctl_args *a);
int tagbudgets_list(struct ctl *ctl, const struct ctl_args *a);
int tagbudgets_delete(struct ctl *ctl, const struct ctl_args *a);

#endif
