/* Unit tests of recovery: a journal left by a killed run (admitted decisions, rows
 * built but not stored, rows stored already, copies, a half-written entry) replayed
 * into a fresh pending table and queue, with the counters and the journal files
 * checked afterwards. Real journal files, a real store: SQLite, and PostgreSQL when
 * TALLY_TEST_PG_URL is set (teststore.h). */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "acct.h"
#include "counters.h"
#include "db.h"
#include "journal.h"
#include "owner.h"
#include "pending.h"
#include "queue.h"
#include "recovery.h"
#include "teststore.h"
#include "tmpdir.h"
#include "unit.h"

static enum teststore store_kind;
static char store[1024];

/* A fresh temporary directory for the journal and a fresh store. */
static int fresh(void)
{
	const char *s;

	if (tmpdir_make("recovery") < 0 || !(s = teststore_fresh(store_kind, "tally.db")))
		return -1;
	snprintf(store, sizeof(store), "%s", s);
	return 0;
}

static void row_of(struct acct_row *r, const char *id)
{
	acct_row_init(r);
	snprintf(r->request_id, sizeof(r->request_id), "%s", id);
	snprintf(r->verdict, sizeof(r->verdict), "allow");
	r->outcome = ACCT_COMPLETE;
	r->status = 200;
	r->started_at_ms = 1796278643000;
}

/* Journal files whose name contains part (NULL: all). */
static int seg_count(const char *part)
{
	DIR *d = opendir(tmpdir_path);
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)))
		if (strstr(e->d_name, ".j") && (!part || strstr(e->d_name, part)))
			n++;
	if (d)
		closedir(d);
	return n;
}

/* Appends the first half of a decision's entry to the io0 file of epoch 1, as a write
 * cut short by the kill would leave it. */
static int tear_tail(const char *id)
{
	unsigned char buf[JOURNAL_ENTRY_MAX];
	char path[512] = "";
	struct acct_row r;
	struct dirent *e;
	size_t n;
	int fd, rc = -1;
	DIR *d = opendir(tmpdir_path);

	while (d && (e = readdir(d)))
		if (strstr(e->d_name, "-0000000001-io0.j"))
			snprintf(path, sizeof(path), "%s/%s", tmpdir_path, e->d_name);
	if (d)
		closedir(d);
	row_of(&r, id);
	n = journal_entry_encode(JOURNAL_DECISION, &r, buf, sizeof(buf));
	if (!path[0] || (fd = open(path, O_WRONLY | O_APPEND)) < 0)
		return -1;
	if (write(fd, buf, n / 2) == (ssize_t)(n / 2))
		rc = 0;
	close(fd);
	return rc;
}

/* The killed run: what it journaled, unreleased, over two epochs. */
static int earlier_run(void)
{
	struct journal_log *io0, *io1, *intake;
	struct acct_row r;
	struct journal *j;
	char err[256];
	const char *decided1[] = { "admitted", "built-later", "built-same", "stored" };
	size_t i;

	if (!(j = journal_open(tmpdir_path, 0, err, sizeof(err))))
		return -1;
	io0 = journal_log_open(j, "io0");
	io1 = journal_log_open(j, "io1");
	intake = journal_log_open(j, "intake");
	for (i = 0; i < sizeof(decided1) / sizeof(decided1[0]); i++) {
		row_of(&r, decided1[i]);
		journal_append(io0, JOURNAL_DECISION, &r);
	}
	row_of(&r, "admitted");              /* a copy, as a re-journaling run leaves */
	journal_append(io1, JOURNAL_DECISION, &r);
	row_of(&r, "built-same");            /* its row, in the same epoch */
	journal_append(intake, JOURNAL_ROW, &r);
	row_of(&r, "stored");
	journal_append(intake, JOURNAL_ROW, &r);
	row_of(&r, "alone");                 /* HAProxy answered alone: a row, no decision */
	r.key_id = 7;                        /* and one that stored a response */
	snprintf(r.response_id, sizeof(r.response_id), "resp_alone");
	journal_append(intake, JOURNAL_ROW, &r);
	journal_flush(io0);
	journal_flush(io1);
	journal_flush(intake);
	journal_tick(j);                     /* epoch 2: the later row's file sorts after */
	row_of(&r, "built-later");
	journal_append(intake, JOURNAL_ROW, &r);
	row_of(&r, "alone");                 /* a copy of a row */
	journal_append(intake, JOURNAL_ROW, &r);
	journal_flush(intake);
	journal_log_close(io0);
	journal_log_close(io1);
	journal_log_close(intake);
	journal_close(j);
	return tear_tail("half");
}

struct run {
	struct db *db;
	struct journal *journal;
	struct journal_log *log;
	struct pending *pending;
	struct queue *queue;
	struct owner *owners;
	struct recovery_result res;
	int rc;
};

static void run_open(struct run *r)
{
	char err[256];
	struct recovery_target t;

	memset(r, 0, sizeof(*r));
	CHECK(db_open(store, DB_CREATE, &r->db, err, sizeof(err)) == 0);
	r->journal = journal_open(tmpdir_path, 0, err, sizeof(err));
	CHECK(r->journal != NULL);
	if (!r->journal || !r->db) {
		r->rc = -1;
		return;
	}
	r->log = journal_log_open(r->journal, "main");
	r->pending = pending_new(16);
	r->queue = queue_new(16);
	r->owners = owner_new(16);
	t = (struct recovery_target){ r->db, r->journal, r->log, r->pending, r->queue, NULL,
	                              r->owners, NULL };
	r->rc = recovery_run(&t, &r->res, err, sizeof(err));
	if (r->rc < 0)
		fprintf(stderr, "%s\n", err);
}

static void run_close(struct run *r)
{
	if (r->log)
		journal_log_close(r->log);
	if (r->journal)
		journal_close(r->journal);
	pending_free(r->pending);
	owner_free(r->owners);
	if (r->queue)
		queue_free(r->queue);
	db_close(r->db);
}

static int id_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* The rows queued, by id, sorted; their journal entries released as the writer does. */
static void run_drain(struct run *r, char ids[][ACCT_ID_MAX], size_t *n)
{
	struct acct_row rows[16];
	size_t i;

	*n = queue_pop(r->queue, rows, 16, 0);
	for (i = 0; i < *n; i++) {
		memcpy(ids[i], rows[i].request_id, ACCT_ID_MAX);
		journal_release(r->journal, rows[i].journal_epoch[0]);
		journal_release(r->journal, rows[i].journal_epoch[1]);
	}
	qsort(ids, *n, ACCT_ID_MAX, id_cmp);
}

static void test_replay(void)
{
	char ids[16][ACCT_ID_MAX], err[256];
	struct owner_entry e;
	struct acct_row p;
	struct counters c;
	struct db *db = NULL;
	struct run r;
	size_t n;

	if (fresh() < 0 || earlier_run() < 0) {
		CHECK(0);
		return;
	}
	/* The stored row: the run committed it before it died. */
	CHECK(db_open(store, DB_CREATE, &db, err, sizeof(err)) == 0);
	CHECK(db_exec(db, "INSERT INTO requests (request_id, outcome, usage_source, started_at)"
	                  " VALUES ('stored', 'complete', 'none', 1)", err, sizeof(err)) == 0);
	db_close(db);
	counters_set(&(struct counters){ .received = 5, .written = 5 });

	run_open(&r);
	CHECK_EQ_INT(r.rc, 0);
	/* 5 + 1 + 7 entries; the half-written one is not among them */
	CHECK_EQ_INT(r.res.entries, 10);
	CHECK_EQ_INT(journal_replay_damaged(r.journal), 1);
	CHECK_EQ_INT(r.res.queued, 3);
	CHECK_EQ_INT(r.res.pending, 1);
	CHECK_EQ_INT(r.res.dropped, 0);
	/* Each transaction counted received once: 3 rows queued, 1 decision pending. */
	c = counters_now();
	CHECK_EQ_INT(c.received, 5 + 4);
	CHECK_EQ_INT(c.duplicates, 0);
	CHECK_EQ_INT(c.written + c.dropped, 5);
	CHECK_EQ_INT(pending_count(r.pending), 1);
	CHECK(pending_take(r.pending, "admitted", &p));
	CHECK(!pending_take(r.pending, "built-later", &p));
	/* A replayed row's stored response is its key's again. */
	CHECK_EQ_INT(owner_count(r.owners), 1);
	CHECK(owner_get(r.owners, "resp_alone", 10, &e) && e.key_id == 7);
	run_drain(&r, ids, &n);
	CHECK_EQ_INT(n, 3);
	if (n == 3) {
		CHECK_EQ_STR(ids[0], "alone");
		CHECK_EQ_STR(ids[1], "built-later");
		CHECK_EQ_STR(ids[2], "built-same");
	}
	/* The old files went once what they held was journaled again; with the rows
	 * stored and the decision resolved, nothing is left to keep. */
	CHECK_EQ_INT(seg_count("-io0.j"), 0);
	journal_release(r.journal, p.journal_epoch[0]);
	run_close(&r);
	CHECK_EQ_INT(seg_count(NULL), 0);
	tmpdir_remove();
}

/* A run killed again right after recovery replays to the same place (no row is stored
 * here: the one the first test stored is queued too). */
static void test_replay_twice(void)
{
	char ids[16][ACCT_ID_MAX];
	struct run r;
	size_t n;

	if (fresh() < 0 || earlier_run() < 0) {
		CHECK(0);
		return;
	}
	counters_set(&(struct counters){ 0 });
	run_open(&r);
	CHECK_EQ_INT(r.res.queued, 4);
	run_close(&r);                     /* killed: nothing stored, nothing released */
	counters_set(&(struct counters){ 0 });
	run_open(&r);
	CHECK_EQ_INT(r.rc, 0);
	CHECK_EQ_INT(r.res.queued, 4);
	CHECK_EQ_INT(r.res.pending, 1);
	CHECK_EQ_INT(counters_now().received, 5);
	run_drain(&r, ids, &n);
	CHECK_EQ_INT(n, 4);
	run_close(&r);
	tmpdir_remove();
}

/* More decisions than the pending table takes: each one left over whose row does not
 * come later is counted dropped, never lost unseen nor counted twice. */
static void test_pending_full(void)
{
	struct journal_log *io0, *intake;
	struct acct_row row;
	struct journal *j;
	char err[256], id[32];
	const int rows_for[] = { 0, 18, 19 };
	struct run r;
	size_t k;
	int i;

	if (fresh() < 0 || !(j = journal_open(tmpdir_path, 0, err, sizeof(err)))) {
		CHECK(0);
		return;
	}
	io0 = journal_log_open(j, "io0");
	intake = journal_log_open(j, "intake");
	for (i = 0; i < 20; i++) {
		snprintf(id, sizeof(id), "decided-%d", i);
		row_of(&row, id);
		journal_append(io0, JOURNAL_DECISION, &row);
		if (i >= 18)                   /* a copy of a decision that finds no room */
			journal_append(io0, JOURNAL_DECISION, &row);
	}
	journal_flush(io0);
	journal_tick(j);                   /* the rows' file sorts after the decisions' */
	for (k = 0; k < sizeof(rows_for) / sizeof(rows_for[0]); k++) {
		snprintf(id, sizeof(id), "decided-%d", rows_for[k]);
		row_of(&row, id);
		journal_append(intake, JOURNAL_ROW, &row);
	}
	journal_flush(intake);
	journal_log_close(io0);
	journal_log_close(intake);
	journal_close(j);
	counters_set(&(struct counters){ 0 });
	run_open(&r);                      /* a pending table of 16 */
	/* 16 pending, one of them resolved by its row; of the 4 without room, 2 get their
	 * row and 2 are counted dropped: each transaction received once. */
	CHECK_EQ_INT(r.res.pending, 15);
	CHECK_EQ_INT(r.res.queued, 3);
	CHECK_EQ_INT(r.res.dropped, 2);
	CHECK_EQ_INT(counters_now().received, 20);
	CHECK_EQ_INT(counters_now().dropped, 2);
	run_close(&r);
	tmpdir_remove();
}

int main(void)
{
	int i;

	for (i = 0; i < teststore_count(); i++) {
		store_kind = (enum teststore)i;
		printf("store: %s\n", teststore_name(store_kind));
		RUN(test_replay);
		RUN(test_replay_twice);
		RUN(test_pending_full);
	}
	return UNIT_DONE();
}
