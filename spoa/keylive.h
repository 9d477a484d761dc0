/* keylive: per-key figures since the agent started (in flight, requests, tokens, cost)
 * for the live view. I/O threads count admissions, the intake thread counts rows; one
 * mutex, held for a table probe. */
#ifndef TALLY_KEYLIVE_H
#define TALLY_KEYLIVE_H

#include <stdint.h>

#include "acct-t.h"
#include "live-t.h"

struct keylive;

struct keylive *keylive_new(void);
void keylive_free(struct keylive *k);

/* A request of key_id was admitted (in flight until keylive_ended). Any thread. */
void keylive_admit(struct keylive *k, int64_t key_id);

/* A transaction of key_id counted by keylive_admit ended (never below 0). */
void keylive_ended(struct keylive *k, int64_t key_id);

/* A row was built: its request, tokens and cost count. */
void keylive_row(struct keylive *k, const struct acct_row *row);

void keylive_each(struct keylive *k, void (*cb)(void *cbarg, const struct live_key *lk),
                  void *cbarg);

#endif
