/* Unit tests of hold: the fate of a key's hold at every event of its decision, and
 * hold_apply carrying it out on a quota, a live view and an owners' table. */
#include <string.h>

#include "acct.h"
#include "hold.h"
#include "keylive.h"
#include "owner.h"
#include "quota.h"
#include "unit.h"

#define T0 1796278643000LL

/* Every event's fate, as worker.c and intake.c did it before hold.c. */
static void test_every_event(void)
{
	static const struct {
		enum hold_event e;
		struct hold_fate f;
	} want[] = {
		{ HOLD_NO_ID, { HOLD_QUOTA_GIVE_BACK, 0, 0, 0 } },
		{ HOLD_NOT_NOTED, { HOLD_QUOTA_GIVE_BACK, 1, 0, 0 } },
		{ HOLD_RECORD_FIRST, { HOLD_QUOTA_GIVE_BACK, 1, 0, 0 } },
		{ HOLD_NOTED, { HOLD_QUOTA_KEEP, 0, 1, 1 } },
		{ HOLD_REPLACED, { HOLD_QUOTA_GIVE_BACK, 1, 0, -1 } },
		{ HOLD_RECORD, { HOLD_QUOTA_CHARGE, 0, -1, -1 } },
		{ HOLD_EXPIRED, { HOLD_QUOTA_CHARGE, 0, -1, -1 } },
		{ HOLD_RECOUNTED, { HOLD_QUOTA_CHARGE, 1, 0, 0 } },
		{ HOLD_UNHELD, { HOLD_QUOTA_KEEP, 0, 0, 0 } },
	};
	size_t i;

	CHECK_EQ_INT(sizeof(want) / sizeof(want[0]), HOLD_EVENT_COUNT);
	for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		struct hold_fate f = hold_fate(want[i].e);

		CHECK_EQ_INT(f.quota, want[i].f.quota);
		CHECK_EQ_INT(f.journal, want[i].f.journal);
		CHECK_EQ_INT(f.in_flight, want[i].f.in_flight);
		CHECK_EQ_INT(f.creating, want[i].f.creating);
	}
	CHECK_EQ_INT(hold_fate(HOLD_EVENT_COUNT).quota, HOLD_QUOTA_KEEP);
}

/* A reservation is settled exactly once: every event that ends a decision before it
 * is noted, or a noted one, settles it; noting keeps it; a row nobody held keeps none. */
static void test_settled_once(void)
{
	static const enum hold_event ends[] = {
		HOLD_NO_ID, HOLD_NOT_NOTED, HOLD_RECORD_FIRST, HOLD_REPLACED, HOLD_RECORD,
		HOLD_EXPIRED, HOLD_RECOUNTED,
	};
	size_t i;

	for (i = 0; i < sizeof(ends) / sizeof(ends[0]); i++)
		CHECK(hold_fate(ends[i]).quota != HOLD_QUOTA_KEEP);
	CHECK_EQ_INT(hold_fate(HOLD_NOTED).quota, HOLD_QUOTA_KEEP);
	CHECK_EQ_INT(hold_fate(HOLD_UNHELD).quota, HOLD_QUOTA_KEEP);
	/* what noting counts in flight, a row that ends it uncounts */
	CHECK_EQ_INT(hold_fate(HOLD_NOTED).in_flight + hold_fate(HOLD_RECORD).in_flight, 0);
	CHECK_EQ_INT(hold_fate(HOLD_NOTED).creating + hold_fate(HOLD_EXPIRED).creating, 0);
}

struct live {
	int64_t inflight;
};

static void live_of(void *arg, const struct live_key *lk)
{
	struct live *l = arg;

	if (lk->key_id == 7)
		l->inflight = lk->inflight;
}

static int64_t in_flight(struct keylive *kl)
{
	struct live l = { -1 };

	keylive_each(kl, live_of, &l);
	return l.inflight;
}

/* A limited key (one request in flight) through noted, then its record. */
static void test_apply(void)
{
	struct quota_cfg one = { .max_concurrent = 1 };
	struct quota_status st;
	struct quota *q = quota_new();
	struct keylive *kl = keylive_new();
	struct owner *o = owner_new(4);
	struct hold_ctx c = { q, kl, o, NULL };
	struct quota_hold h;
	struct acct_row row;

	acct_row_init(&row);
	row.key_id = 7;
	row.flags = ACCT_FLAG_CREATES_RESPONSE;
	CHECK_EQ_INT(quota_admit(q, 7, &one, 10, 0, T0, &row.holds[ACCT_HOLD_KEY], &st), QUOTA_OK);
	hold_apply(&c, HOLD_NOTED, &row, 1, T0);
	CHECK_EQ_INT(in_flight(kl), 1);
	CHECK(owner_creates_pending(o, 7));
	CHECK_EQ_INT(quota_admit(q, 7, &one, 10, 0, T0, &h, &st), QUOTA_CONCURRENCY);
	row.prompt_tokens = 3;
	row.completion_tokens = 4;
	hold_apply(&c, HOLD_RECORD, &row, 0, T0 + 1);
	CHECK_EQ_INT(in_flight(kl), 0);
	CHECK(!owner_creates_pending(o, 7));
	CHECK_EQ_INT(quota_admit(q, 7, &one, 10, 0, T0 + 2, &h, &st), QUOTA_OK);
	/* a denial noted counts nothing in flight; a hold given back frees its slot */
	hold_apply(&c, HOLD_NOTED, &row, 0, T0 + 2);
	CHECK_EQ_INT(in_flight(kl), 0);
	CHECK(!owner_creates_pending(o, 7));
	row.holds[ACCT_HOLD_KEY] = h;
	hold_apply(&c, HOLD_NO_ID, &row, 1, T0 + 3);
	CHECK_EQ_INT(quota_admit(q, 7, &one, 10, 0, T0 + 3, &h, &st), QUOTA_OK);
	/* A tag's hold after an empty one is settled too. */
	acct_row_init(&row);
	row.key_id = 7;
	CHECK_EQ_INT(quota_admit(q, quota_tag_subject(2), &one, 10, 0, T0, &row.holds[ACCT_HOLD_TAGS + 1], &st),
	             QUOTA_OK);
	CHECK_EQ_INT(quota_admit(q, quota_tag_subject(2), &one, 10, 0, T0, &h, &st),
	             QUOTA_CONCURRENCY);
	hold_apply(&c, HOLD_RECORD, &row, 0, T0 + 4);
	CHECK_EQ_INT(quota_admit(q, quota_tag_subject(2), &one, 10, 0, T0 + 4, &h, &st), QUOTA_OK);
	owner_free(o);
	keylive_free(kl);
	quota_free(q);
}

int main(void)
{
	RUN(test_every_event);
	RUN(test_settled_once);
	RUN(test_apply);
	return UNIT_DONE();
}
