/* hold: the fate of a key's hold at each event of its decision, and carrying it out
 * (see hold.h). hold_fate is pure; hold_apply runs on the thread of the event: the I/O
 * threads for a decision's, the intake thread (and the main thread's journal replay)
 * for a row's. */
#include "hold.h"

#include "join.h"
#include "journal.h"
#include "keylive.h"
#include "owner.h"
#include "quota.h"

struct hold_fate hold_fate(enum hold_event e)
{
	static const struct hold_fate fates[HOLD_EVENT_COUNT] = {
		[HOLD_NO_ID] = { HOLD_QUOTA_GIVE_BACK, 0, 0, 0 },
		[HOLD_NOT_NOTED] = { HOLD_QUOTA_GIVE_BACK, 1, 0, 0 },
		[HOLD_RECORD_FIRST] = { HOLD_QUOTA_GIVE_BACK, 1, 0, 0 },
		[HOLD_NOTED] = { HOLD_QUOTA_KEEP, 0, 1, 1 },
		/* The first decision's create is given back, not its place in flight: the
		 * second one's row ends one only. */
		[HOLD_REPLACED] = { HOLD_QUOTA_GIVE_BACK, 1, 0, -1 },
		[HOLD_RECORD] = { HOLD_QUOTA_CHARGE, 0, -1, -1 },
		[HOLD_EXPIRED] = { HOLD_QUOTA_CHARGE, 0, -1, -1 },
		/* Its row was made without it: only the reservation is left to settle. */
		[HOLD_RECOUNTED] = { HOLD_QUOTA_CHARGE, 1, 0, 0 },
		[HOLD_UNHELD] = { HOLD_QUOTA_KEEP, 0, 0, 0 },
	};
	static const struct hold_fate none = { HOLD_QUOTA_KEEP, 0, 0, 0 };

	return (unsigned)e < HOLD_EVENT_COUNT ? fates[e] : none;
}

/* Whether row holds anything of any limit. */
static int hold_any(const struct acct_row *row)
{
	size_t i;

	for (i = 0; i < ACCT_HOLDS; i++)
		if (row->holds[i].key_id)
			return 1;
	return 0;
}

void hold_apply(const struct hold_ctx *c, enum hold_event e, const struct acct_row *row,
                int allowed, int64_t now_ms)
{
	struct hold_fate f = hold_fate(e);
	int creates = (row->flags & ACCT_FLAG_CREATES_RESPONSE) != 0;
	int64_t tokens = ACCT_NONE, cost = ACCT_NONE;

	if (c->quota && f.quota != HOLD_QUOTA_KEEP && hold_any(row)) {
		size_t i;

		if (f.quota == HOLD_QUOTA_CHARGE)
			join_charge(row, &tokens, &cost);
		/* Each on its own: an admission may leave a gap (quota_admit's empty hold). */
		for (i = 0; i < ACCT_HOLDS; i++)
			quota_settle(c->quota, &row->holds[i], tokens, cost, now_ms);
	}
	if (f.journal && c->journal)
		journal_release(c->journal, row->journal_epoch[0]);
	if (c->keylive && f.in_flight > 0 && allowed)
		keylive_admit(c->keylive, row->key_id);
	else if (c->keylive && f.in_flight < 0)
		keylive_ended(c->keylive, row->key_id);
	if (c->owners && creates && (f.creating < 0 || (f.creating > 0 && allowed)))
		owner_creating(c->owners, row->key_id, f.creating);
}
