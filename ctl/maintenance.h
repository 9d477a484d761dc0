/* maintenance: the store's upkeep commands, backup and prune. tallyctl is
 * single-threaded. */
#ifndef TALLY_MAINTENANCE_H
#define TALLY_MAINTENANCE_H

#include "ctl.h"

int maintenance_backup(struct ctl *ctl, const struct ctl_args *a);
int maintenance_prune(struct ctl *ctl, const struct ctl_args *a);

#endif
