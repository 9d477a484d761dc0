/* preflight: the self-check's report and database check (see preflight.h). Main
 * thread, during --self-check only. */
#include "preflight.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>

#include "db.h"

void preflight_init(struct preflight *p, FILE *out)
{
	p->out = out;
	p->checks = 0;
	p->failed = 0;
}

int preflight_report(struct preflight *p, int ok, const char *fmt, ...)
{
	va_list ap;

	p->checks++;
	if (!ok)
		p->failed++;
	fputs(ok ? PREFLIGHT_OK : PREFLIGHT_FAIL, p->out);
	va_start(ap, fmt);
	vfprintf(p->out, fmt, ap);
	va_end(ap);
	fputc('\n', p->out);
	fflush(p->out);
	return ok ? 0 : -1;
}

int preflight_db(struct preflight *p, const char *path)
{
	char err[1024], name[512];
	struct stat st;
	struct db *db;
	int v;

	/* SQLite's own words for a missing file ("unable to open database file") say too
	 * little, and a read-only open must not be what finds out. A PostgreSQL URL has no
	 * file: its open says what is wrong. */
	if (!db_is_postgres(path) && stat(path, &st) < 0)
		return preflight_report(p, 0, "database %s: %s%s", path, strerror(errno),
		                        errno == ENOENT ? " (start the agent or run tallyctl once to "
		                        "create it)" : "");
	if (!db_is_postgres(path) && !S_ISREG(st.st_mode))
		return preflight_report(p, 0, "database %s: not a regular file", path);
	if (db_open(path, DB_PROBE, &db, err, sizeof(err)) < 0)
		return preflight_report(p, 0, "%s", err);
	v = db_schema_version(db);
	db_close(db);
	return preflight_report(p, 1, "database %s: schema version %d",
	                        db_store_name(path, name, sizeof(name)), v);
}

int preflight_finish(struct preflight *p, const char *prog)
{
	if (p->failed)
		fprintf(p->out, "%s --self-check: %d of %d checks failed\n", prog, p->failed,
		        p->checks);
	else
		fprintf(p->out, "%s --self-check: %d checks passed\n", prog, p->checks);
	fflush(p->out);
	return p->failed ? 1 : 0;
}
