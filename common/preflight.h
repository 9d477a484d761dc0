/* preflight: what tally-agent --self-check and tally-queryd --self-check share: the
 * report, one line per check ("ok   WHAT" or "FAIL WHAT: WHY") and a closing summary,
 * and the database check, which opens the database without a trace (DB_PROBE: read
 * only, never created, never migrated). Runs on the main thread of either binary,
 * instead of a start: nothing else runs then. */
#ifndef TALLY_PREFLIGHT_H
#define TALLY_PREFLIGHT_H

#include <stdio.h>

#define PREFLIGHT_OK   "ok   "
#define PREFLIGHT_FAIL "FAIL "

struct preflight {
	FILE *out;
	int checks;
	int failed;
};

void preflight_init(struct preflight *p, FILE *out);

/* Prints one check's line: PREFLIGHT_OK or PREFLIGHT_FAIL, then the text (a failure's
 * reads "WHAT: WHY"). Returns 0 if ok, else -1. */
int preflight_report(struct preflight *p, int ok, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Checks that the database at path exists and opens, read only, at the schema version
 * this binary expects; the failure says what to run (tallyctl or the agent create and
 * migrate it; a newer schema needs a newer tally). Reports one line; 0 or -1. */
int preflight_db(struct preflight *p, const char *path);

/* Prints "PROG --self-check: N checks passed" or "... M of N checks failed" and returns
 * the exit status: 0 when every check passed, else 1. */
int preflight_finish(struct preflight *p, const char *prog);

#endif
