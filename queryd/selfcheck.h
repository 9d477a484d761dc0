/* selfcheck: tally-queryd --self-check. Checks what a start needs without starting and
 * without writing anything: the flags parse (main.c parses them, as for a start), the
 * database opens read only at this binary's schema (preflight.c), the operator token
 * (file readable, private, and a token the server accepts; or the environment's), the
 * listen address can be bound (bound and closed at once), and the dashboard's files
 * are there (embedded, or under --static). One line per check and a summary
 * (preflight.h). Main thread, instead of a start. */
#ifndef QUERYD_SELFCHECK_H
#define QUERYD_SELFCHECK_H

#include <stdio.h>

/* What a start would use. */
struct selfcheck_queryd {
	const char *db;
	const char *listen;
	const char *token_file;    /* NULL: none */
	const char *token_env;     /* $TALLY_OPERATOR_TOKEN, NULL or "" when unset */
	const char *static_dir;    /* NULL: the embedded dashboard */
};

/* Runs every check and prints its line to out, then the summary. config_error is NULL,
 * or why the flags did not parse (c is then unused and that is the only check).
 * Returns the exit status: 0 when every check passed, else 1. */
int selfcheck_queryd(FILE *out, const struct selfcheck_queryd *c, const char *config_error);

#endif
