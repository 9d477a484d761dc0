/* prices: rate cards: the prices set, list and delete commands, and the card parsing
 * and writing that model set and prices import share. tallyctl is single-threaded. */
#ifndef TALLY_PRICES_H
#define TALLY_PRICES_H

#include <stdint.h>

#include "ctl.h"
#include "pricecard.h"

/* Prices stay below $1M per million tokens so that tokens x price fits in int64 for
 * any realistic request. */
#define PRICES_MICROS_MAX   1000000000000LL
#define PRICES_TOKENS_MAX   1000000000000LL   /* a rate card's above_tokens */

/* A rate card's prices (model_prices), indexed by enum price_class (pricecard.h, whose
 * column names are also the member names of the tally import format): the option that
 * sets each, the header of prices list and the LiteLLM key in dollars per token. */
struct prices_field {
	enum ctl_opt_id opt;
	const char *header;
	const char *litellm;          /* NULL: not per token (web searches, per call) */
};

extern const struct prices_field prices_fields[PRICE_CLASSES];

#define CARD_PRICE_OPTS (OPT(OPT_INPUT) | OPT(OPT_CACHED) | OPT(OPT_CACHE_WRITE) | \
                         OPT(OPT_CACHE_WRITE_1H) | OPT(OPT_OUTPUT) | OPT(OPT_REASONING) | \
                         OPT(OPT_AUDIO_INPUT) | OPT(OPT_AUDIO_OUTPUT) | OPT(OPT_WEB_SEARCH))

/* One rate card: a row of model_prices without its model. */
struct prices_card {
	const char *tier;             /* borrowed */
	int64_t above;
	int64_t price[PRICE_CLASSES];
	unsigned known;               /* bit i: price[i] is set; clear: NULL, unknown */
};

int prices_card_parse_prices(const struct ctl_command *cmd, const struct ctl_args *a,
                             struct prices_card *c);
int prices_card_write(struct ctl *ctl, int64_t model_id, const struct prices_card *c, int merge);
int prices_warn_unpriced(struct ctl *ctl, int64_t model_id, const char *name);

int prices_set(struct ctl *ctl, const struct ctl_args *a);
int prices_list(struct ctl *ctl, const struct ctl_args *a);
int prices_delete(struct ctl *ctl, const struct ctl_args *a);

#endif
