/* ctl: what every tallyctl command shares: the option table, error messages, store
 * access, the owner (--key or --team) of a key's or a team's rows and the list
 * printers. tallyctl is single-threaded. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ctl.h"
#include "teams.h"

#define CTL_MAX_COLS     24
#define CTL_CELL_BUF     32

const struct ctl_opt ctl_opts[OPT_COUNT] = {
	[OPT_NAME] = { "name", "NAME" },
	[OPT_MODELS] = { "models", "M1,M2,..." },
	[OPT_DEFAULT_MODEL] = { "default-model", "MODEL" },
	[OPT_PROVIDER] = { "provider", "PROVIDER" },
	[OPT_INPUT] = { "input-micros", "N" },
	[OPT_OUTPUT] = { "output-micros", "N" },
	[OPT_CACHED] = { "cached-micros", "N" },
	[OPT_CACHE_WRITE] = { "cache-write-micros", "N" },
	[OPT_API] = { "api", "openai|anthropic" },
	[OPT_BACKEND] = { "backend", "BACKEND" },
	[OPT_URL] = { "url", "URL" },
	[OPT_JSON] = { "json", NULL },
	[OPT_RPM] = { "rpm", "N" },
	[OPT_TPM] = { "tpm", "N" },
	[OPT_MAX_CONCURRENT] = { "max-concurrent", "N" },
	[OPT_BUDGET_USD] = { "budget-usd", "X" },
	[OPT_BUDGET_PERIOD] = { "budget-period", "day|week|month|total" },
	[OPT_OLDER_THAN_DAYS] = { "older-than-days", "N" },
	[OPT_BATCH] = { "batch", "ROWS" },
	[OPT_PAUSE_MS] = { "pause-ms", "MS" },
	[OPT_DRY_RUN] = { "dry-run", NULL },
	[OPT_TIER] = { "tier", "TIER" },
	[OPT_ABOVE] = { "above", "TOKENS" },
	[OPT_CACHE_WRITE_1H] = { "cache-write-1h-micros", "N" },
	[OPT_REASONING] = { "reasoning-micros", "N" },
	[OPT_AUDIO_INPUT] = { "audio-input-micros", "N" },
	[OPT_AUDIO_OUTPUT] = { "audio-output-micros", "N" },
	[OPT_WEB_SEARCH] = { "web-search-micros-per-call", "N" },
	[OPT_FORMAT] = { "format", "tally|litellm" },
	[OPT_VERBOSE] = { "verbose", NULL },
	[OPT_SERVICE_TIERS] = { "service-tiers", "T1,T2,..." },
	[OPT_SERVER_TOOLS] = { "server-tools", "priced|allow|deny|inherit" },
	[OPT_AUDIO] = { "audio", "priced|allow|deny|inherit" },
	[OPT_MAX_OUTPUT] = { "max-output", "N" },
	[OPT_CACHE_WRITES] = { "cache-writes", "priced|allow|deny|inherit" },
	[OPT_TEAM] = { "team", "TEAM" },
	[OPT_MEMBERS_SEE_USAGE] = { "members-see-usage", "yes|no" },
	[OPT_END_USERS] = { "end-users", "optional|required|forbidden" },
	[OPT_TAGS] = { "tags", "NAME=VALUE,..." },
	[OPT_KEY] = { "key", "KEY" },
	[OPT_BUDGET_TZ] = { "budget-tz", "ZONE" },
};

/* ---- messages ---- */

int ctl_error(const char *fmt, ...)
{
	va_list ap;

	fputs("tallyctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return CTL_FAIL;
}

/* cmd may be NULL for errors before a command is known. */
int ctl_usage(const struct ctl_command *cmd, const char *fmt, ...)
{
	va_list ap;

	fputs("tallyctl: ", stderr);
	if (cmd)
		fprintf(stderr, "%s%s%s: ", cmd->group, cmd->verb ? " " : "", cmd->verb ? cmd->verb : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (cmd)
		fprintf(stderr, "\nRun 'tallyctl %s%s%s --help' for usage.\n", cmd->group,
		        cmd->verb ? " " : "", cmd->verb ? cmd->verb : "");
	else
		fputs("\nRun 'tallyctl --help' for usage.\n", stderr);
	return CTL_USAGE;
}

int ctl_db_error(struct ctl *ctl)
{
	return ctl_error("database error: %s", db_errmsg(ctl->db));
}

/* ---- database helpers ---- */

/* Opens the database once; later calls find it open. */
int ctl_db_open(struct ctl *ctl)
{
	char err[1024];

	if (ctl->db)
		return CTL_OK;
	if (db_open(ctl->db_path, DB_CREATE, &ctl->db, err, sizeof(err)) < 0)
		return ctl_error("%s", err);
	return CTL_OK;
}

/* The key-hashing secret, created if missing. By default it sits beside a SQLite file;
 * a PostgreSQL store has no file to sit beside and every agent using it must hash with
 * the same secret, so its path must be given. */
int ctl_secret_load(const struct ctl *ctl, unsigned char secret[KEYHASH_SECRET_LEN])
{
	char path[4096], err[1024];

	if (!ctl->secret_path && db_is_postgres(ctl->db_path))
		return ctl_error("a PostgreSQL store needs the key-hashing secret's path: --secret PATH "
		                 "or TALLY_SECRET_FILE (the file every agent of the store uses)");
	if (keyhash_secret_path(ctl->secret_path, ctl->db_path, path, sizeof(path)) < 0)
		return ctl_error("%s path too long: %s", ctl->secret_path ? "secret" : "database",
		                 ctl->secret_path ? ctl->secret_path : ctl->db_path);
	if (keyhash_secret_load(path, 1, secret, err, sizeof(err)) < 0)
		return ctl_error("%s", err);
	return CTL_OK;
}

static int ctl_sql(struct ctl *ctl, const char *sql)
{
	char err[512];

	if (db_exec(ctl->db, sql, err, sizeof(err)) < 0)
		return ctl_error("database error: %s", err);
	return CTL_OK;
}

/* Begins a write transaction. On SQLite it takes the write lock at once, so what the
 * command checks in it still holds at COMMIT; on PostgreSQL the unique constraints
 * settle races the checks cannot see (two key creates of one name). */
int ctl_begin(struct ctl *ctl)
{
	return db_begin(ctl->db) == DB_OK ? CTL_OK : ctl_db_error(ctl);
}

int ctl_commit(struct ctl *ctl)
{
	return db_commit(ctl->db) == DB_OK ? CTL_OK : ctl_db_error(ctl);
}

/* Begins a read transaction: one snapshot for both passes of a text table. SQLite's
 * deferred BEGIN takes no write lock, so the agent's writer goes on meanwhile;
 * PostgreSQL needs REPEATABLE READ for one snapshot across statements. */
static int ctl_begin_read(struct ctl *ctl)
{
	if (db_kind(ctl->db) == DB_SQLITE)
		return ctl_sql(ctl, "BEGIN");
	if (ctl_begin(ctl) != CTL_OK)
		return CTL_FAIL;
	return ctl_sql(ctl, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY");
}

const char *ctl_sql_of(const struct ctl *ctl, struct ctl_sql q)
{
	return db_kind(ctl->db) == DB_POSTGRES ? q.pg : q.sqlite;
}

void ctl_rollback(struct ctl *ctl)
{
	if (ctl->db)
		db_rollback(ctl->db);
}

/* Prepares sql and binds one argument per character of types: 't' text (NULL binds
 * NULL), 'i' int64_t, 'n' const int64_t * (NULL binds NULL), 'b' blob as
 * (const void *, size_t). Bound memory must outlive the statement. Returns NULL after
 * reporting an error. */
static struct db_stmt *ctl_vprepare(struct ctl *ctl, const char *sql, const char *types,
                                    va_list ap)
{
	struct db_stmt *st = NULL;
	int i, rc = 0;

	if (db_prepare(ctl->db, sql, &st) < 0) {
		ctl_db_error(ctl);
		return NULL;
	}
	for (i = 0; types[i] && rc == 0; i++) {
		const int64_t *maybe;
		const void *blob;
		const char *s;

		switch (types[i]) {
		case 't':
			s = va_arg(ap, const char *);
			rc = s ? db_bind_text(st, i + 1, s, strlen(s)) : db_bind_null(st, i + 1);
			break;
		case 'i':
			rc = db_bind_int(st, i + 1, va_arg(ap, int64_t));
			break;
		case 'n':
			maybe = va_arg(ap, const int64_t *);
			rc = maybe ? db_bind_int(st, i + 1, *maybe) : db_bind_null(st, i + 1);
			break;
		case 'b':
			blob = va_arg(ap, const void *);
			rc = db_bind_blob(st, i + 1, blob, va_arg(ap, size_t));
			break;
		default:
			rc = -1;
		}
	}
	if (rc == 0)
		return st;
	ctl_error("database error: cannot bind parameter %d of a statement", i);
	db_finalize(st);
	return NULL;
}

struct db_stmt *ctl_prepare(struct ctl *ctl, const char *sql, const char *types, ...)
{
	struct db_stmt *st;
	va_list ap;

	va_start(ap, types);
	st = ctl_vprepare(ctl, sql, types, ap);
	va_end(ap);
	return st;
}

/* Runs a statement that returns no rows. Returns the number of changed rows, or -1. */
int ctl_exec(struct ctl *ctl, const char *sql, const char *types, ...)
{
	struct db_stmt *st;
	va_list ap;
	int rc = -1;

	va_start(ap, types);
	st = ctl_vprepare(ctl, sql, types, ap);
	va_end(ap);
	if (!st)
		return -1;
	if (db_step(st) != DB_DONE)
		ctl_db_error(ctl);
	else
		rc = (int)db_changes(st);
	db_finalize(st);
	return rc;
}

/* Runs a query for at most one row, to its end; stores its first column in *id when
 * id is set. Returns 1 if a row was found, 0 if not, -1 on error. */
int ctl_find(struct ctl *ctl, int64_t *id, const char *sql, const char *types, ...)
{
	struct db_stmt *st;
	enum db_status rc;
	va_list ap;
	int found = 0;

	va_start(ap, types);
	st = ctl_vprepare(ctl, sql, types, ap);
	va_end(ap);
	if (!st)
		return -1;
	rc = db_step(st);
	if (rc == DB_ROW) {
		if (id)
			*id = db_col_int(st, 0);
		found = 1;
		rc = db_step(st);
	}
	if (rc != DB_DONE && rc != DB_ROW) {
		ctl_db_error(ctl);
		found = -1;
	}
	db_finalize(st);
	return found;
}

/* The id of the model named name into *id; an unknown name is an error. */
int ctl_model_id(struct ctl *ctl, const char *name, int64_t *id)
{
	int found = ctl_find(ctl, id, "SELECT id FROM models WHERE name = ?1", "t", name);

	if (found == 0)
		return ctl_error("unknown model '%s' (see 'tallyctl model list')", name);
	return found == 1 ? CTL_OK : CTL_FAIL;
}

/* CTL_OK if no row is named name (exists: "SELECT 1 FROM table WHERE name = ?1"), else
 * CTL_FAIL, reported. */
int ctl_name_free(struct ctl *ctl, const char *what, const char *exists, const char *name)
{
	int found = ctl_find(ctl, NULL, exists, "t", name);

	if (found > 0)
		ctl_error("a %s named '%s' already exists", what, name);
	return found == 0 ? CTL_OK : CTL_FAIL;
}

/* Runs st, an INSERT ... RETURNING id of the row named name, to its end and finalizes
 * it (NULL: preparing it failed); the id into *id. On PostgreSQL another tallyctl may
 * have inserted the name since this one looked (both saw none): the unique constraint
 * refuses the second, which then ends its transaction and, if the name is there now,
 * reports it as ctl_name_free would. */
int ctl_insert_named(struct ctl *ctl, struct db_stmt *st, const char *what, const char *exists,
                     const char *name, int64_t *id)
{
	enum db_status rc;
	char err[512];

	if (!st)
		return CTL_FAIL;
	*id = 0;
	rc = db_step(st);
	if (rc == DB_ROW) {
		*id = db_col_int(st, 0);
		rc = db_step(st);
	}
	snprintf(err, sizeof(err), "%s", rc == DB_DONE ? "INSERT returned no id" : db_errmsg(ctl->db));
	db_finalize(st);
	if (rc == DB_DONE && *id > 0)
		return CTL_OK;
	if (rc == DB_CONSTRAINT) {
		ctl_rollback(ctl);
		if (ctl_find(ctl, NULL, exists, "t", name) == 1)
			return ctl_error("a %s named '%s' already exists", what, name);
	}
	return ctl_error("database error: %s", err);
}

/* ---- rows of a key or of a team (end users' limits, budgets per model) ---- */

/* whose: what the rows are to their owner, for the message when neither or both of
 * --key and --team are given. */
int ctl_scope_check(const struct ctl_command *cmd, const struct ctl_args *a, const char *whose)
{
	if (!a->val[OPT_KEY] == !a->val[OPT_TEAM])
		return ctl_usage(cmd, "give the key (--key KEY) or the team (--team TEAM) %s, one of"
		                 " the two", whose);
	return CTL_OK;
}

int ctl_scope_id(struct ctl *ctl, const struct ctl_args *a, const char **col, int64_t *id)
{
	int found;

	if (a->val[OPT_TEAM]) {
		*col = "team_id";
		return teams_id(ctl, a->val[OPT_TEAM], id);
	}
	*col = "key_id";
	found = ctl_find(ctl, id, "SELECT id FROM keys WHERE name = ?1", "t", a->val[OPT_KEY]);
	if (found == 0)
		return ctl_error("no key named '%s' (see 'tallyctl key list')", a->val[OPT_KEY]);
	return found == 1 ? CTL_OK : CTL_FAIL;
}

void ctl_scope_who(const struct ctl_args *a, const char *what, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s of %s %s", what, a->val[OPT_TEAM] ? "team" : "key",
	         a->val[OPT_TEAM] ? a->val[OPT_TEAM] : a->val[OPT_KEY]);
}

int ctl_scope_delete(struct ctl *ctl, const struct ctl_args *a, const char *table,
                     const char *column, const char *value, const char *what, const char *who,
                     const char *none)
{
	const char *col;
	char sql[160];
	int status = CTL_FAIL, changed;
	int64_t id;

	if (ctl_db_open(ctl) != CTL_OK || ctl_begin(ctl) != CTL_OK ||
	    ctl_scope_id(ctl, a, &col, &id) != CTL_OK)
		goto out;
	snprintf(sql, sizeof(sql), "DELETE FROM %s WHERE %s = ?1 AND %s = ?2", table, col, column);
	changed = ctl_exec(ctl, sql, "it", id, value);
	if (changed == 0)
		ctl_error("%s %s", who, none);
	if (changed <= 0 || ctl_commit(ctl) != CTL_OK)
		goto out;
	printf("deleted %s of %s\n", what, who);
	status = CTL_OK;
out:
	if (status != CTL_OK)
		ctl_rollback(ctl);
	return status;
}

/* A list command's filter is --key or --team, or neither: every row. */
int ctl_scope_list(struct ctl *ctl, const struct ctl_args *a, struct ctl_sql q,
                   const struct ctl_col *cols, int ncols)
{
	if (a->val[OPT_KEY] && a->val[OPT_TEAM])
		return ctl_usage(ctl->cmd, "give --key or --team, not both");
	return ctl_print_table(ctl, q, cols, ncols, ctl_list_printer(a), "tt", a->val[OPT_KEY],
	                       a->val[OPT_TEAM]);
}

/* ---- table output: one printer serves every list command ---- */

/* Text form of a cell. The result points into buf or into st's row. */
static const char *ctl_cell_text(struct db_stmt *st, int i, enum ctl_col_kind kind,
                                 char buf[CTL_CELL_BUF])
{
	const char *s;
	struct tm tm;
	time_t t;
	int64_t v;
	int n;

	if (db_col_type(st, i) == DB_NULL)
		return kind == COL_LIST ? "*" : "-";
	switch (kind) {
	case COL_INT:
		snprintf(buf, CTL_CELL_BUF, "%lld", (long long)db_col_int(st, i));
		return buf;
	case COL_USD:
		/* Exact dollars without trailing zeros: 12500000 -> "12.5", 1 -> "0.000001". */
		v = db_col_int(st, i);
		n = snprintf(buf, CTL_CELL_BUF, "%lld.%06lld", (long long)(v / CTL_MICROS_PER_USD),
		             (long long)(v % CTL_MICROS_PER_USD));
		while (buf[n - 1] == '0')
			n--;
		buf[buf[n - 1] == '.' ? n - 1 : n] = '\0';
		return buf;
	case COL_BOOL:
		return db_col_int(st, i) ? "yes" : "no";
	case COL_TIME:
		t = (time_t)db_col_int(st, i);
		if (!gmtime_r(&t, &tm) || !strftime(buf, CTL_CELL_BUF, "%Y-%m-%dT%H:%M:%SZ", &tm))
			snprintf(buf, CTL_CELL_BUF, "%lld", (long long)t);
		return buf;
	default:
		s = db_col_text(st, i);
		return s ? s : "";
	}
}

static void ctl_print_row(const char *const *cells, const size_t *width, int ncols)
{
	int i;

	for (i = 0; i < ncols - 1; i++)
		printf("%-*s  ", (int)width[i], cells[i]);
	printf("%s\n", cells[ncols - 1]);
}

/* Two passes inside the caller's read transaction: widths, then rows. */
int ctl_table_text(struct ctl *ctl, struct db_stmt *st, const struct ctl_col *cols,
                   int ncols)
{
	char bufs[CTL_MAX_COLS][CTL_CELL_BUF];
	const char *cells[CTL_MAX_COLS];
	size_t width[CTL_MAX_COLS];
	enum db_status rc;
	int i, pass;

	for (i = 0; i < ncols; i++) {
		cells[i] = cols[i].header;
		width[i] = strlen(cols[i].header);
	}
	for (pass = 0; pass < 2; pass++) {
		if (pass == 1)
			ctl_print_row(cells, width, ncols);
		while ((rc = db_step(st)) == DB_ROW) {
			for (i = 0; i < ncols; i++) {
				size_t n;

				cells[i] = ctl_cell_text(st, i, cols[i].kind, bufs[i]);
				n = strlen(cells[i]);
				if (n > width[i])
					width[i] = n;
			}
			if (pass == 1)
				ctl_print_row(cells, width, ncols);
		}
		if (rc != DB_DONE)
			return ctl_db_error(ctl);
		db_reset(st);
		for (i = 0; i < ncols; i++)
			cells[i] = cols[i].header;
	}
	return CTL_OK;
}

/* Adds item to an object (key set) or an array; frees item if that fails. 0 or -1. */
int ctl_json_add(cJSON *parent, const char *key, cJSON *item)
{
	if (item && (key ? cJSON_AddItemToObject(parent, key, item) : cJSON_AddItemToArray(parent, item)))
		return 0;
	cJSON_Delete(item);
	return -1;
}

static cJSON *ctl_json_list(const char *csv)
{
	cJSON *arr = cJSON_CreateArray();
	char *copy = strdup(csv), *p = copy, *comma;

	if (!arr || !copy)
		goto fail;
	for (;;) {
		comma = strchr(p, ',');
		if (comma)
			*comma = '\0';
		if (ctl_json_add(arr, NULL, cJSON_CreateString(p)) < 0)
			goto fail;
		if (!comma)
			break;
		p = comma + 1;
	}
	free(copy);
	return arr;
fail:
	free(copy);
	cJSON_Delete(arr);
	return NULL;
}

static cJSON *ctl_cell_json(struct db_stmt *st, int i, enum ctl_col_kind kind)
{
	char buf[CTL_CELL_BUF];
	const char *s;

	if (db_col_type(st, i) == DB_NULL)
		return cJSON_CreateNull();
	switch (kind) {
	case COL_INT:
	case COL_TIME:
	case COL_USD:
		/* Raw decimal keeps int64 exact (cJSON numbers are doubles). */
		snprintf(buf, sizeof(buf), "%lld", (long long)db_col_int(st, i));
		return cJSON_CreateRaw(buf);
	case COL_BOOL:
		return cJSON_CreateBool(db_col_int(st, i) != 0);
	case COL_LIST:
	case COL_CSV:
		s = db_col_text(st, i);
		return s ? ctl_json_list(s) : NULL;
	default:
		s = db_col_text(st, i);
		return s ? cJSON_CreateString(s) : NULL;
	}
}

/* Adds a new object holding the row's cells from column first on to parent (under
 * key, or to an array). 0 or -1. */
int ctl_json_row(cJSON *parent, const char *key, struct db_stmt *st,
                 const struct ctl_col *cols, int first, int ncols)
{
	cJSON *row = cJSON_CreateObject();
	int i;

	if (ctl_json_add(parent, key, row) < 0)
		return -1;
	for (i = first; i < ncols; i++) {
		if (ctl_json_add(row, cols[i].json, ctl_cell_json(st, i, cols[i].kind)) < 0)
			return -1;
	}
	return 0;
}

/* Prints doc on one line and frees it. oom: building doc ran out of memory. */
int ctl_json_print(cJSON *doc, int oom)
{
	char *text = oom ? NULL : cJSON_PrintUnformatted(doc);
	int status = CTL_OK;

	if (text)
		printf("%s\n", text);
	else
		status = ctl_error("out of memory");
	cJSON_free(text);
	cJSON_Delete(doc);
	return status;
}

static int ctl_table_json(struct ctl *ctl, struct db_stmt *st, const struct ctl_col *cols,
                          int ncols)
{
	cJSON *arr = cJSON_CreateArray();
	enum db_status rc = DB_DONE;
	int oom = !arr;

	while (!oom && (rc = db_step(st)) == DB_ROW)
		oom = ctl_json_row(arr, NULL, st, cols, 0, ncols) < 0;
	if (!oom && rc != DB_DONE) {
		cJSON_Delete(arr);
		return ctl_db_error(ctl);
	}
	return ctl_json_print(arr, oom);
}

/* Prints the rows of q, its parameters bound as ctl_prepare binds them, with print
 * inside one read transaction. */
int ctl_print_table(struct ctl *ctl, struct ctl_sql q, const struct ctl_col *cols, int ncols,
                    ctl_printer *print, const char *types, ...)
{
	struct db_stmt *st = NULL;
	int status = CTL_FAIL;
	va_list ap;

	if (ctl_db_open(ctl) != CTL_OK || ctl_begin_read(ctl) != CTL_OK)
		goto out;
	va_start(ap, types);
	st = ctl_vprepare(ctl, ctl_sql_of(ctl, q), types, ap);
	va_end(ap);
	if (st)
		status = print(ctl, st, cols, ncols);
out:
	db_finalize(st);
	ctl_rollback(ctl);
	return status;
}

/* The printer of a list command: a JSON array with --json, else a text table. */
ctl_printer *ctl_list_printer(const struct ctl_args *a)
{
	return a->val[OPT_JSON] ? ctl_table_json : ctl_table_text;
}
