/* ctl: what every tallyctl command shares: the run's context, the option ids and
 * the command-table entry, error messages, store access (open, transactions,
 * prepared statements), the owner of a key's or a team's rows and the list printers
 * (aligned text, JSON). tallyctl is single-threaded. */
#ifndef TALLY_CTL_H
#define TALLY_CTL_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "db.h"
#include "keyhash.h"

#define CTL_MICROS_PER_USD 1000000LL

enum ctl_status { CTL_OK = 0, CTL_FAIL = 1, CTL_USAGE = 2, CTL_HELP = 3 };

enum ctl_opt_id {
	OPT_NAME, OPT_MODELS, OPT_DEFAULT_MODEL, OPT_PROVIDER, OPT_INPUT, OPT_OUTPUT,
	OPT_CACHED, OPT_CACHE_WRITE, OPT_API, OPT_BACKEND, OPT_URL, OPT_JSON, OPT_RPM, OPT_TPM,
	OPT_MAX_CONCURRENT, OPT_BUDGET_USD, OPT_BUDGET_PERIOD, OPT_OLDER_THAN_DAYS, OPT_BATCH,
	OPT_PAUSE_MS, OPT_DRY_RUN, OPT_TIER, OPT_ABOVE, OPT_CACHE_WRITE_1H, OPT_REASONING,
	OPT_AUDIO_INPUT, OPT_AUDIO_OUTPUT, OPT_WEB_SEARCH, OPT_FORMAT, OPT_VERBOSE,
	OPT_SERVICE_TIERS, OPT_SERVER_TOOLS, OPT_AUDIO, OPT_MAX_OUTPUT, OPT_CACHE_WRITES, OPT_TEAM,
	OPT_MEMBERS_SEE_USAGE, OPT_END_USERS, OPT_TAGS, OPT_KEY, OPT_BUDGET_TZ, OPT_COUNT
};

#define OPT(id) (UINT64_C(1) << (id))
_Static_assert(OPT_COUNT <= 64, "option sets are 64-bit masks");

struct ctl_opt {
	const char *name;
	const char *metavar;   /* NULL for a switch */
};

extern const struct ctl_opt ctl_opts[OPT_COUNT];

/* Parsed command line of one command; strings are borrowed from argv. */
struct ctl_args {
	const char *val[OPT_COUNT];   /* NULL if absent; a switch points at its argv entry */
	const char *operand;          /* the positional NAME, for commands that take one */
};

struct ctl;

struct ctl_command {
	const char *group;
	const char *verb;             /* NULL: a one-word command (backup, prune) */
	const char *synopsis;         /* after "tallyctl [OPTIONS] " */
	const char *help;
	const char *operand;          /* metavar of the positional argument, NULL if none;
	                               * "[NAME]": it may be left out */
	uint64_t allowed;             /* OPT() bits */
	uint64_t required;
	uint64_t operand_alt;         /* OPT() bit of an option that may replace the operand */
	int (*run)(struct ctl *ctl, const struct ctl_args *a);
};

struct ctl {
	const char *db_path;
	const char *secret_path;      /* NULL: db_path + ".secret" */
	struct db *db;                /* opened by ctl_db_open(), owned, closed by main */
	const struct ctl_command *cmd;
};

enum ctl_col_kind { COL_INT, COL_TEXT, COL_TIME, COL_LIST, COL_CSV, COL_USD, COL_BOOL };

struct ctl_col {
	const char *header;           /* text output */
	const char *json;             /* JSON member name */
	enum ctl_col_kind kind;       /* COL_LIST: comma-joined text, NULL meaning "all";
	                               * COL_CSV: the same, NULL meaning unset ("-");
	                               * COL_USD: micro-dollars, shown as dollars in text;
	                               * COL_BOOL: 0 or 1, yes or no in text */
};

typedef int ctl_printer(struct ctl *ctl, struct db_stmt *st, const struct ctl_col *cols,
                        int ncols);

/* One statement in the two dialects, where they differ. Most often only in the order
 * of text: PostgreSQL orders text by the database's locale (en_US puts "b" before "C"),
 * SQLite by bytes; COLLATE "C" is PostgreSQL's byte order, and a name SQLite does not
 * know. CTL_SQL(M) expands M(C) twice, C being what goes after each ordered text
 * column, so that output is in one order on both stores. */
struct ctl_sql {
	const char *sqlite;
	const char *pg;
};

#define CTL_SQL(M) ((struct ctl_sql){ M(""), M(" COLLATE \"C\"") })

int ctl_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int ctl_usage(const struct ctl_command *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
int ctl_db_error(struct ctl *ctl);

int ctl_db_open(struct ctl *ctl);
int ctl_secret_load(const struct ctl *ctl, unsigned char secret[KEYHASH_SECRET_LEN]);
int ctl_begin(struct ctl *ctl);
int ctl_commit(struct ctl *ctl);
void ctl_rollback(struct ctl *ctl);
const char *ctl_sql_of(const struct ctl *ctl, struct ctl_sql q);
struct db_stmt *ctl_prepare(struct ctl *ctl, const char *sql, const char *types, ...);
int ctl_exec(struct ctl *ctl, const char *sql, const char *types, ...);
int ctl_find(struct ctl *ctl, int64_t *id, const char *sql, const char *types, ...);
int ctl_model_id(struct ctl *ctl, const char *name, int64_t *id);
int ctl_name_free(struct ctl *ctl, const char *what, const char *exists, const char *name);
int ctl_insert_named(struct ctl *ctl, struct db_stmt *st, const char *what, const char *exists,
                     const char *name, int64_t *id);

/* Rows that belong to a key or to a team, one of the two (end users' limits, budgets per
 * model), named by --key KEY or --team TEAM. ctl_scope_id: the owner's column (key_id or
 * team_id) and id, an unknown name an error; ctl_scope_who: "WHAT of key KEY" (or team)
 * into buf, for messages; ctl_scope_list: prints q, a list of such rows (CTL_SCOPE_FROM),
 * of the key or team given, or of all without either; ctl_scope_delete: deletes the row
 * of table whose column is value, of the owner a names, after ctl_scope_check, saying
 * "deleted WHAT of WHO", or "WHO has no WHAT..." (none) when there is none. */
int ctl_scope_check(const struct ctl_command *cmd, const struct ctl_args *a, const char *whose);
int ctl_scope_id(struct ctl *ctl, const struct ctl_args *a, const char **col, int64_t *id);
void ctl_scope_who(const struct ctl_args *a, const char *what, char *buf, size_t cap);
int ctl_scope_list(struct ctl *ctl, const struct ctl_args *a, struct ctl_sql q,
                   const struct ctl_col *cols, int ncols);
int ctl_scope_delete(struct ctl *ctl, const struct ctl_args *a, const char *table,
                     const char *column, const char *value, const char *what, const char *who,
                     const char *none);

/* The text of such a list, table l, keys' rows first by key name, then teams' by team
 * name, each with its owner's name (the other NULL), filtered by ?1 the key's name, ?2
 * the team's (NULL: any); the CAST gives PostgreSQL the type that IS NULL alone does
 * not. C is CTL_SQL's; the caller's order by its own columns follows. */
#define CTL_SCOPE_COLS { "KEY", "key", COL_TEXT }, { "TEAM", "team", COL_TEXT }
#define CTL_SCOPE_FROM(table, C)                                                         \
	" FROM " table " l LEFT JOIN keys k ON k.id = l.key_id"                          \
	" LEFT JOIN teams t ON t.id = l.team_id"                                         \
	" WHERE (CAST(?1 AS TEXT) IS NULL OR k.name = ?1)"                               \
	" AND (CAST(?2 AS TEXT) IS NULL OR t.name = ?2)"                                 \
	" ORDER BY k.name IS NULL, k.name" C ", t.name" C

int ctl_table_text(struct ctl *ctl, struct db_stmt *st, const struct ctl_col *cols, int ncols);
int ctl_json_add(cJSON *parent, const char *key, cJSON *item);
int ctl_json_row(cJSON *parent, const char *key, struct db_stmt *st, const struct ctl_col *cols,
                 int first, int ncols);
int ctl_json_print(cJSON *doc, int oom);
int ctl_print_table(struct ctl *ctl, struct ctl_sql q, const struct ctl_col *cols, int ncols,
                    ctl_printer *print, const char *types, ...);
ctl_printer *ctl_list_printer(const struct ctl_args *a);

#endif
