/* priceimport: prices import, rate cards read from a tally or LiteLLM prices file.
 * tallyctl is single-threaded. */
#ifndef TALLY_PRICEIMPORT_H
#define TALLY_PRICEIMPORT_H

#include <stdint.h>

#include "ctl.h"

int priceimport_run(struct ctl *ctl, const struct ctl_args *a);

/* Exact micro-dollars of v dollars times 10^scale. 0, or -1 if v is out of range. */
int priceimport_dollars_to_micros(double v, int scale, int64_t *out);
/* A LiteLLM key's price index in prices_fields, tier and prompt size; -1: not mapped. */
int priceimport_litellm_key(const char *key, const char **tier, int64_t *above);

#endif
