/* providers: the provider commands, set and list. tallyctl is single-threaded. */
#ifndef TALLY_PROVIDERS_H
#define TALLY_PROVIDERS_H

#include "ctl.h"

int providers_set(struct ctl *ctl, const struct ctl_args *a);
int providers_list(struct ctl *ctl, const struct ctl_args *a);

#endif
