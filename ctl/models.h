/* models: the model commands, set and list. tallyctl is single-threaded. */
#ifndef TALLY_MODELS_H
#define TALLY_MODELS_H

#include "ctl.h"

#define MODEL_PRICE_OPTS (OPT(OPT_INPUT) | OPT(OPT_OUTPUT) | OPT(OPT_CACHED) | \
                          OPT(OPT_CACHE_WRITE))

int models_set(struct ctl *ctl, const struct ctl_args *a);
int models_list(struct ctl *ctl, const struct ctl_args *a);

#endif
