/* maintenance: backup (a checked, synced copy of a SQLite store) and prune (raw usage
 * rows deleted in short batches). tallyctl is single-threaded. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "maintenance.h"

#define CTL_PATH_MAX     4096

/* prune: raw rows are kept at least a day (the agent's journal and pending table only
 * ever look at recent ids); batches are small so that each DELETE transaction holds
 * the write lock for milliseconds: the agent's writer waits WRITER_BUSY_MS (100 ms)
 * for the lock before backing off, and a short hold never reaches that. */
#define CTL_PRUNE_DAYS_MAX   36500
#define CTL_PRUNE_BATCH_DEF  1000
#define CTL_PRUNE_BATCH_MAX  100000
#define CTL_PRUNE_PAUSE_DEF  50
#define CTL_PRUNE_PAUSE_MAX  60000
#define CTL_MS_PER_DAY       86400000LL
/* Days of rows a budget in a time zone may need: a month and its zone's offset. */
#define CTL_PRUNE_ZONED_DAYS 32

/* fsyncs path (a file, or a directory so that a rename in it is durable). 0 or -1. */
static int maintenance_fsync_path(const char *path, int flags)
{
	int fd = open(path, flags | O_CLOEXEC), rc;

	if (fd < 0)
		return -1;
	rc = fsync(fd);
	if (close(fd) < 0)
		rc = -1;
	return rc;
}

/* Opens path read-only without ctl_db_open's create-or-migrate: a backup must never
 * change the database it copies. */
static int maintenance_open_readonly(const char *path, struct db **out)
{
	char err[1024];

	if (db_open(path, DB_READONLY, out, err, sizeof(err)) < 0)
		return ctl_error("%s", err);
	return CTL_OK;
}

/* Checks the copy at path: PRAGMA integrity_check must say "ok". Reports its schema
 * version and requests rows. */
static int maintenance_backup_verify(const char *path, int64_t *version, int64_t *rows)
{
	struct db *db = NULL;
	struct db_stmt *st = NULL;
	const char *res;
	int status = CTL_FAIL;

	if (maintenance_open_readonly(path, &db) != CTL_OK)
		goto out;
	if (db_prepare(db, "PRAGMA integrity_check(1)", &st) < 0 || db_step(st) != DB_ROW) {
		ctl_error("backup %s: cannot check it: %s", path, db_errmsg(db));
		goto out;
	}
	res = db_col_text(st, 0);
	if (!res || strcmp(res, "ok") != 0) {
		ctl_error("backup %s: integrity check failed: %s", path, res ? res : "no answer");
		goto out;
	}
	*version = db_schema_version(db);
	if (*version < 0 || db_query_int(db, "SELECT count(*) FROM requests", rows) < 0) {
		ctl_error("backup %s: cannot read it: %s", path, db_errmsg(db));
		goto out;
	}
	status = CTL_OK;
out:
	db_finalize(st);
	db_close(db);
	return status;
}

/* VACUUM INTO rather than the page-by-page backup API: it copies one read transaction's
 * snapshot, so the agent keeps writing meanwhile (WAL readers never block the writer),
 * and the copy comes out compact, a single file in rollback-journal mode. SQLite does
 * not fsync it, hence the temporary name, fsync, rename and directory fsync: DEST
 * either does not exist or is a complete, checked copy. */
int maintenance_backup(struct ctl *ctl, const struct ctl_args *a)
{
	const char *dest = a->operand;
	char tmp[CTL_PATH_MAX], dir[CTL_PATH_MAX], *slash;
	struct db *src = NULL;
	struct db_stmt *st = NULL;
	int status = CTL_FAIL, made_tmp = 0, fd;
	int64_t version, rows;
	struct stat sb;

	/* Consistent copies of a PostgreSQL database are pg_dump's job, or the cluster's
	 * own base backups, not a client's. */
	if (db_is_postgres(ctl->db_path))
		return ctl_error("backup copies a SQLite database; for a PostgreSQL store use "
		                 "pg_dump (e.g. pg_dump -Fc -f %s URL) or the cluster's own backups",
		                 dest);
	if (snprintf(tmp, sizeof(tmp), "%s.tmp-%ld", dest, (long)getpid()) >= (int)sizeof(tmp) ||
	    snprintf(dir, sizeof(dir), "%s", dest) >= (int)sizeof(dir))
		return ctl_usage(ctl->cmd, "destination path too long");
	if (lstat(dest, &sb) == 0) {
		ctl_error("%s exists: a backup never overwrites a file", dest);
		goto out;
	}
	if (maintenance_open_readonly(ctl->db_path, &src) != CTL_OK)
		goto out;
	if (db_prepare(src, "VACUUM INTO ?1", &st) < 0 || db_bind_text(st, 1, tmp, strlen(tmp)) < 0) {
		ctl_error("database %s: %s", ctl->db_path, db_errmsg(src));
		goto out;
	}
	/* SQLite would create the copy 0644 less the umask, and it holds key hashes and
	 * usage: it is created here, empty and owner-only, and VACUUM INTO fills it. fchmod
	 * because the umask may have taken the owner's own write bit. Closed before SQLite
	 * opens it: closing a descriptor drops the process's locks on the file. */
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		ctl_error("cannot create %s: %s", tmp, strerror(errno));
		goto out;
	}
	made_tmp = 1;
	if (fchmod(fd, 0600) < 0) {
		ctl_error("cannot set the mode of %s: %s", tmp, strerror(errno));
		close(fd);
		goto out;
	}
	close(fd);
	if (db_step(st) != DB_DONE) {
		ctl_error("backup to %s failed: %s", dest, db_errmsg(src));
		goto out;
	}
	if (maintenance_backup_verify(tmp, &version, &rows) != CTL_OK)
		goto out;
	if (maintenance_fsync_path(tmp, O_RDONLY) < 0) {
		ctl_error("cannot sync %s: %s", tmp, strerror(errno));
		goto out;
	}
	/* link() fails if dest appeared meanwhile, where rename() would replace it. */
	if (link(tmp, dest) < 0) {
		ctl_error("cannot create %s: %s", dest, strerror(errno));
		goto out;
	}
	slash = strrchr(dir, '/');
	if (slash)
		slash[slash == dir ? 1 : 0] = '\0';
	else
		snprintf(dir, sizeof(dir), ".");
	if (maintenance_fsync_path(dir, O_RDONLY | O_DIRECTORY) < 0) {
		ctl_error("cannot sync directory %s: %s", dir, strerror(errno));
		goto out;
	}
	printf("backup %s: schema version %lld, %lld requests rows, integrity ok\n", dest,
	       (long long)version, (long long)rows);
	status = CTL_OK;
out:
	db_finalize(st);
	db_close(src);
	if (made_tmp)
		unlink(tmp);
	return status;
}

/* Sleeps ms milliseconds (0: not at all). */
static void maintenance_sleep_ms(int64_t ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };

	while (ms > 0 && nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Deletes raw requests rows that started before the cutoff, batch rows per
 * transaction, pausing between batches. Each batch is its own BEGIN IMMEDIATE ...
 * COMMIT: IMMEDIATE takes the write lock up front through the busy handler, where a
 * deferred DELETE would upgrade a read lock and could fail at once with SQLITE_BUSY
 * when the agent's writer committed in between (on PostgreSQL, db_begin's plain BEGIN:
 * the DELETE locks only its rows). Rollups (usage_*, model_*)
 * and the accounting counters are left alone: dashboards keep their history and
 * received = written + dropped keeps counting every transaction ever accounted. While a
 * key or team counts its budget in a time zone, the rows of the last
 * CTL_PRUNE_ZONED_DAYS stay: a zone off the hour (+05:30) begins its period inside an
 * hour, whose part after the start only the rows hold (spoa/spend.c). */
int maintenance_prune(struct ctl *ctl, const struct ctl_args *a)
{
	static const char delete_sql[] =
		"DELETE FROM requests WHERE id IN (SELECT id FROM requests WHERE started_at < ?1"
		" ORDER BY started_at LIMIT ?2)";
	int64_t days, batch = CTL_PRUNE_BATCH_DEF, pause = CTL_PRUNE_PAUSE_DEF, cutoff, total = 0;
	int64_t batches = 0, n;
	char when[32], err[1024];
	struct tm tm;
	time_t t;
	int status;

	status = args_parse_int(ctl->cmd, OPT_OLDER_THAN_DAYS, a->val[OPT_OLDER_THAN_DAYS], 1,
	                        CTL_PRUNE_DAYS_MAX, "", &days);
	if (status == CTL_OK && a->val[OPT_BATCH])
		status = args_parse_int(ctl->cmd, OPT_BATCH, a->val[OPT_BATCH], 1, CTL_PRUNE_BATCH_MAX,
		                        "", &batch);
	if (status == CTL_OK && a->val[OPT_PAUSE_MS])
		status = args_parse_int(ctl->cmd, OPT_PAUSE_MS, a->val[OPT_PAUSE_MS], 0,
		                        CTL_PRUNE_PAUSE_MAX, "", &pause);
	if (status != CTL_OK)
		return status;
	status = CTL_FAIL;
	/* DB_READWRITE, not ctl_db_open's DB_CREATE: a mistyped --db must not become a new,
	 * empty database that "prunes" nothing. */
	if (db_open(ctl->db_path, DB_READWRITE, &ctl->db, err, sizeof(err)) < 0) {
		ctl_error("%s", err);
		goto out;
	}
	if (days < CTL_PRUNE_ZONED_DAYS) {
		if (ctl_find(ctl, &n, "SELECT (SELECT count(*) FROM keys WHERE budget_tz IS NOT NULL)"
		             " + (SELECT count(*) FROM teams WHERE budget_tz IS NOT NULL)", "") != 1)
			goto out;
		if (n > 0) {
			fprintf(stderr, "tallyctl: keeping the rows of the last %d days: %lld keys and"
			        " teams count their budgets in a time zone, whose period may begin"
			        " inside an hour only the rows hold\n", CTL_PRUNE_ZONED_DAYS, (long long)n);
			days = CTL_PRUNE_ZONED_DAYS;
		}
	}
	/* requests.started_at is unix milliseconds. */
	cutoff = (db_now() * 1000) - days * CTL_MS_PER_DAY;
	t = (time_t)(cutoff / 1000);
	if (!gmtime_r(&t, &tm) || strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(when, sizeof(when), "%lld ms", (long long)cutoff);
	if (a->val[OPT_DRY_RUN]) {
		if (ctl_find(ctl, &n, "SELECT count(*) FROM requests WHERE started_at < ?1", "i",
		             cutoff) != 1)
			goto out;
		printf("would prune %lld requests rows started before %s\n", (long long)n, when);
		status = CTL_OK;
		goto out;
	}
	for (;;) {
		if (ctl_begin(ctl) != CTL_OK)
			goto out;
		n = ctl_exec(ctl, delete_sql, "ii", cutoff, batch);
		if (n < 0 || ctl_commit(ctl) != CTL_OK)
			goto out;
		total += n;
		batches += n > 0;
		if (n < batch)
			break;
		maintenance_sleep_ms(pause);
	}
	printf("pruned %lld requests rows started before %s in %lld batches\n", (long long)total,
	       when, (long long)batches);
	status = CTL_OK;
out:
	if (status != CTL_OK) {
		ctl_rollback(ctl);
		if (total > 0)
			fprintf(stderr, "tallyctl: prune stopped after deleting %lld rows; run it again "
			        "to continue\n", (long long)total);
	}
	return status;
}
