/* recovery: the journal replayed at start-up (see recovery.h). Main thread. */
#include "recovery.h"

#include <stdio.h>
#include <string.h>

#include "acct.h"
#include "counters.h"
#include "db.h"
#include "dedupe.h"
#include "intake.h"
#include "join.h"
#include "journal.h"
#include "pending.h"

struct recovery {
	const struct recovery_target *t;
	struct db_stmt *stored;      /* SELECT 1 FROM requests WHERE request_id = ? */
	struct dedupe *rows;         /* ids whose row was replayed */
	struct dedupe *overflow;     /* decisions the pending table had no room for */
	struct recovery_result *res;
};

static int recovery_stored(struct recovery *r, const char *id)
{
	db_reset(r->stored);
	db_bind_text(r->stored, 1, id, strlen(id));
	return db_step(r->stored) == DB_ROW;
}

/* Copies of an entry (a run that crashed after re-journaling what it replayed leaves
 * both) are not arrivals: they count nothing. */
static void recovery_row(struct recovery *r, struct acct_row *row)
{
	const struct recovery_target *t = r->t;
	struct hold_ctx hold = { NULL, t->keylive, t->owners, t->journal };
	struct acct_row decided;
	int admitted;

	if (dedupe_seen(r->rows, row->request_id) || recovery_stored(r, row->request_id))
		return;      /* a copy of a row replayed, or one stored: counted already */
	dedupe_add(r->rows, row->request_id, 0);
	/* Its decision was replayed first: the row resolves it. */
	admitted = pending_take(t->pending, row->request_id, &decided);
	if (admitted) {
		journal_release(t->journal, decided.journal_epoch[0]);
		r->res->pending--;
	} else if (dedupe_seen(r->overflow, row->request_id)) {
		r->res->dropped--;   /* its decision found no room: the row makes up for it */
	}
	join_count(join_record_fate(0, admitted));
	intake_emit(t->queue, t->spill, &hold, t->log, row, HOLD_UNHELD);
	r->res->queued++;
}

static void recovery_decision(struct recovery *r, struct acct_row *row)
{
	const struct recovery_target *t = r->t;
	struct acct_row old;
	int added;

	if (dedupe_seen(r->rows, row->request_id) || dedupe_seen(r->overflow, row->request_id) ||
	    recovery_stored(r, row->request_id))
		return;      /* its row is queued or stored, or it found no room before */
	row->journal_epoch[0] = journal_append(t->log, JOURNAL_DECISION, row);
	added = pending_add(t->pending, row, acct_now_ms(), &old);
	if (added < 0) {
		/* More decisions than --pending-max allows now: owed a row it cannot get,
		 * unless its row comes later in the journal; counted once replay ends. */
		journal_release(t->journal, row->journal_epoch[0]);
		dedupe_add(r->overflow, row->request_id, 0);
		r->res->dropped++;
	} else if (added == 1) {
		journal_release(t->journal, old.journal_epoch[0]);   /* a copy replaced */
	} else {
		join_count(JOIN_OWED);
		r->res->pending++;
	}
}

static void recovery_entry(void *arg, enum journal_kind k, const struct acct_row *entry)
{
	struct recovery *r = arg;
	struct acct_row row = *entry;

	row.journal_epoch[0] = row.journal_epoch[1] = 0;
	if (k == JOURNAL_ROW)
		recovery_row(r, &row);
	else
		recovery_decision(r, &row);
}

int recovery_run(const struct recovery_target *t, struct recovery_result *res, char *err,
                 size_t errlen)
{
	struct recovery r = { .t = t, .res = res };
	long i;
	int ret = -1;

	memset(res, 0, sizeof(*res));
	if (db_prepare(t->db, "SELECT 1 FROM requests WHERE request_id = ?", &r.stored) < 0) {
		snprintf(err, errlen, "journal recovery: %s", db_errmsg(t->db));
		goto out;
	}
	if (!(r.rows = dedupe_new(0)) || !(r.overflow = dedupe_new(0))) {
		snprintf(err, errlen, "journal recovery: out of memory");
		goto out;
	}
	if ((res->entries = journal_replay(t->journal, recovery_entry, &r)) < 0) {
		snprintf(err, errlen, "journal recovery: cannot read the journal");
		goto out;
	}
	for (i = 0; i < res->dropped; i++)
		join_count(JOIN_OWED);
	counters_drop((uint64_t)res->dropped);
	/* Re-journaled first: only then may the old segments go. */
	if (journal_flush(t->log) < 0) {
		snprintf(err, errlen, "journal recovery: cannot write the journal");
		goto out;
	}
	journal_replay_done(t->journal);
	ret = 0;
out:
	db_finalize(r.stored);
	dedupe_free(r.rows);
	dedupe_free(r.overflow);
	return ret;
}
