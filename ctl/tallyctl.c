/* tallyctl: the operator CLI. Manages API keys, models and providers in the tally
 * database; the agent notices every change through meta.config_generation.
 * Single-threaded. Exit status: 0 success, 1 runtime failure, 2 usage error. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <openssl/crypto.h>

#include "db.h"
#include "gwsecret.h"
#include "keyhash.h"
#include "pricecard.h"
#include "tier.h"

#define CTL_DEFAULT_DB   "./data/tally.db"
#define CTL_NAME_MAX     64
#define CTL_MODEL_MAX    128
#define CTL_URL_MAX      2048
/* Prices stay below $1M per million tokens so that tokens x price fits in int64 for
 * any realistic request. */
#define CTL_MICROS_MAX   1000000000000LL
#define CTL_TOKENS_MAX   1000000000000LL   /* a rate card's above_tokens */
#define CTL_CARDS_MAX    32                /* rate cards one imported model may have */
#define CTL_IMPORT_MAX   (256L << 20)      /* bytes of a prices import file */
#define CTL_XSTR(x)      #x
#define CTL_STR(x)       CTL_XSTR(x)
#define CTL_LIMIT_MAX    1000000000000LL   /* rpm, tpm, max_concurrent */
#define CTL_BUDGET_USD_MAX 1000000000LL    /* whole dollars; 10^15 micros fits int64 */
#define CTL_MICROS_PER_USD 1000000LL
#define CTL_USD_DECIMALS 6                 /* budgets are exact integer micro-dollars */
#define CTL_MAX_COLS     16
#define CTL_CELL_BUF     32
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

enum ctl_status { CTL_OK = 0, CTL_FAIL = 1, CTL_USAGE = 2, CTL_HELP = 3 };

enum ctl_opt_id {
	OPT_NAME, OPT_MODELS, OPT_DEFAULT_MODEL, OPT_PROVIDER, OPT_INPUT, OPT_OUTPUT,
	OPT_CACHED, OPT_CACHE_WRITE, OPT_API, OPT_BACKEND, OPT_URL, OPT_JSON, OPT_RPM, OPT_TPM,
	OPT_MAX_CONCURRENT, OPT_BUDGET_USD, OPT_BUDGET_PERIOD, OPT_OLDER_THAN_DAYS, OPT_BATCH,
	OPT_PAUSE_MS, OPT_DRY_RUN, OPT_TIER, OPT_ABOVE, OPT_CACHE_WRITE_1H, OPT_REASONING,
	OPT_AUDIO_INPUT, OPT_AUDIO_OUTPUT, OPT_WEB_SEARCH, OPT_FORMAT, OPT_VERBOSE,
	OPT_SERVICE_TIERS, OPT_SERVER_TOOLS, OPT_AUDIO, OPT_MAX_OUTPUT, OPT_CACHE_WRITES,
	OPT_COUNT
};

#define OPT(id) (UINT64_C(1) << (id))
_Static_assert(OPT_COUNT <= 64, "option sets are 64-bit masks");

static const struct ctl_opt {
	const char *name;
	const char *metavar;   /* NULL for a switch */
} ctl_opts[OPT_COUNT] = {
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
	[OPT_BUDGET_PERIOD] = { "budget-period", "day|month|total" },
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
};

/* The nullable limit columns of keys, by option; the order of the key set SQL. */
static const enum ctl_opt_id ctl_limit_opts[] = { OPT_RPM, OPT_TPM, OPT_MAX_CONCURRENT,
                                                  OPT_BUDGET_USD };
#define CTL_NLIMITS (sizeof(ctl_limit_opts) / sizeof(ctl_limit_opts[0]))

/* The nullable policy columns of keys, by option; the order of the key set SQL. */
static const enum ctl_opt_id ctl_policy_opts[] = { OPT_SERVICE_TIERS, OPT_SERVER_TOOLS,
                                                   OPT_AUDIO, OPT_CACHE_WRITES };
#define CTL_NPOLICIES (sizeof(ctl_policy_opts) / sizeof(ctl_policy_opts[0]))

/* A rate card's prices (model_prices), indexed by enum price_class (pricecard.h, whose
 * column names are also the member names of the tally import format): the option that
 * sets each, the header of prices list and the LiteLLM key in dollars per token. */
static const struct ctl_price {
	enum ctl_opt_id opt;
	const char *header;
	const char *litellm;          /* NULL: not per token (web searches, per call) */
} ctl_prices[PRICE_CLASSES] = {
	[PRICE_INPUT] = { OPT_INPUT, "INPUT", "input_cost_per_token" },
	[PRICE_CACHED] = { OPT_CACHED, "CACHED", "cache_read_input_token_cost" },
	[PRICE_CACHE_WRITE] = { OPT_CACHE_WRITE, "CACHE_WRITE", "cache_creation_input_token_cost" },
	[PRICE_CACHE_WRITE_1H] = { OPT_CACHE_WRITE_1H, "CACHE_WRITE_1H",
	                           "cache_creation_input_token_cost_above_1hr" },
	[PRICE_OUTPUT] = { OPT_OUTPUT, "OUTPUT", "output_cost_per_token" },
	[PRICE_REASONING] = { OPT_REASONING, "REASONING", "output_cost_per_reasoning_token" },
	[PRICE_AUDIO_INPUT] = { OPT_AUDIO_INPUT, "AUDIO_INPUT", "input_cost_per_audio_token" },
	[PRICE_AUDIO_OUTPUT] = { OPT_AUDIO_OUTPUT, "AUDIO_OUTPUT", "output_cost_per_audio_token" },
	[PRICE_WEB_SEARCH] = { OPT_WEB_SEARCH, "WEB_SEARCH", NULL },
};
#define CTL_NPRICES PRICE_CLASSES
#define CTL_PRICE_WEB_SEARCH PRICE_WEB_SEARCH

#define CARD_PRICE_OPTS (OPT(OPT_INPUT) | OPT(OPT_CACHED) | OPT(OPT_CACHE_WRITE) | \
                         OPT(OPT_CACHE_WRITE_1H) | OPT(OPT_OUTPUT) | OPT(OPT_REASONING) | \
                         OPT(OPT_AUDIO_INPUT) | OPT(OPT_AUDIO_OUTPUT) | OPT(OPT_WEB_SEARCH))
#define MODEL_PRICE_OPTS (OPT(OPT_INPUT) | OPT(OPT_OUTPUT) | OPT(OPT_CACHED) | \
                          OPT(OPT_CACHE_WRITE))

/* One rate card: a row of model_prices without its model. */
struct ctl_card {
	const char *tier;             /* borrowed */
	int64_t above;
	int64_t price[CTL_NPRICES];
	unsigned known;               /* bit i: price[i] is set; clear: NULL, unknown */
};

#define KEY_LIMIT_OPTS (OPT(OPT_RPM) | OPT(OPT_TPM) | OPT(OPT_MAX_CONCURRENT) | \
                        OPT(OPT_BUDGET_USD) | OPT(OPT_BUDGET_PERIOD))
#define KEY_POLICY_OPTS (OPT(OPT_SERVICE_TIERS) | OPT(OPT_SERVER_TOOLS) | OPT(OPT_AUDIO) | \
                         OPT(OPT_CACHE_WRITES))

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

enum ctl_col_kind { COL_INT, COL_TEXT, COL_TIME, COL_LIST, COL_CSV, COL_USD };

struct ctl_col {
	const char *header;           /* text output */
	const char *json;             /* JSON member name */
	enum ctl_col_kind kind;       /* COL_LIST: comma-joined text, NULL meaning "all";
	                               * COL_CSV: the same, NULL meaning unset ("-");
	                               * COL_USD: micro-dollars, shown as dollars in text */
};

typedef int ctl_printer(struct ctl *ctl, struct db_stmt *st, const struct ctl_col *cols,
                        int ncols);

/* ---- messages ---- */

static int ctl_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int ctl_usage(const struct ctl_command *cmd, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int ctl_error(const char *fmt, ...)
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
static int ctl_usage(const struct ctl_command *cmd, const char *fmt, ...)
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

static int ctl_db_error(struct ctl *ctl)
{
	return ctl_error("database error: %s", db_errmsg(ctl->db));
}

/* ---- validation ---- */

/* 1 if s is 1..max characters, each alphanumeric or in extra. */
static int ctl_valid_chars(const char *s, size_t max, const char *extra)
{
	size_t n = strlen(s), i;

	if (n == 0 || n > max)
		return 0;
	for (i = 0; i < n; i++) {
		char c = s[i];

		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      strchr(extra, c)))
			return 0;
	}
	return 1;
}

static int ctl_valid_name(const char *s)
{
	return ctl_valid_chars(s, CTL_NAME_MAX, "._-");
}

/* Model names as providers spell them: "gpt-4o", "meta-llama/Llama-3.1-8B",
 * "llama3.1:8b". No comma, which separates --models. */
static int ctl_valid_model(const char *s)
{
	return ctl_valid_chars(s, CTL_MODEL_MAX, "._-:/@+");
}

/* HAProxy's own rule for proxy names. */
static int ctl_valid_backend(const char *s)
{
	return ctl_valid_chars(s, CTL_MODEL_MAX, "._-:");
}

static int ctl_valid_url(const char *s)
{
	size_t n = strlen(s), i;

	if (n > CTL_URL_MAX || (strncmp(s, "http://", 7) != 0 && strncmp(s, "https://", 8) != 0))
		return 0;
	for (i = 0; i < n; i++) {
		if (s[i] <= ' ' || s[i] == 0x7f)
			return 0;
	}
	return 1;
}

/* Reads the leading decimal digits of s into *v, stopping once *v exceeds max so that
 * it cannot overflow (max <= INT64_MAX / 10 - 9). Returns the number of digits read. */
static size_t ctl_scan_digits(const char *s, int64_t max, int64_t *v)
{
	size_t i;

	*v = 0;
	for (i = 0; s[i] >= '0' && s[i] <= '9' && *v <= max; i++)
		*v = *v * 10 + (s[i] - '0');
	return i;
}

/* Parses an integer option value: decimal digits only, min..max. hint ends the error
 * message. */
static int ctl_parse_int(const struct ctl_command *cmd, enum ctl_opt_id id, const char *s,
                         int64_t min, int64_t max, const char *hint, int64_t *out)
{
	int64_t v;
	size_t n = ctl_scan_digits(s, max, &v);

	if (n == 0 || s[n] || v < min || v > max)
		return ctl_usage(cmd, "invalid value '%s' for --%s: expected an integer from %lld to "
		                 "%lld%s", s, ctl_opts[id].name, (long long)min, (long long)max, hint);
	*out = v;
	return CTL_OK;
}

/* Parses dollars ("12", "12.5", "0.000001") into exact micro-dollars: digits, then
 * optionally '.' and 1-6 digits. No floating point, so every accepted value is exact. */
static int ctl_parse_usd(const struct ctl_command *cmd, enum ctl_opt_id id, const char *s,
                         int64_t *out)
{
	int64_t whole, frac = 0;
	size_t n = ctl_scan_digits(s, CTL_BUDGET_USD_MAX, &whole), nfrac = 0;

	if (n > 0 && s[n] == '.') {
		nfrac = ctl_scan_digits(s + n + 1, CTL_MICROS_PER_USD - 1, &frac);
		n += 1 + nfrac;
	}
	for (; n > 0 && nfrac < CTL_USD_DECIMALS; nfrac++)
		frac *= 10;
	/* A budget of 0 would refuse every request: revoking the key says that plainly. */
	if (n == 0 || s[n] || whole > CTL_BUDGET_USD_MAX || s[n - 1] == '.' ||
	    nfrac > CTL_USD_DECIMALS || (whole == CTL_BUDGET_USD_MAX && frac > 0) ||
	    whole * CTL_MICROS_PER_USD + frac == 0)
		return ctl_usage(cmd, "invalid value '%s' for --%s: expected dollars from 0.000001 to "
		                 "%lld with at most %d decimals (e.g. 12.50), or none for no budget", s,
		                 ctl_opts[id].name, CTL_BUDGET_USD_MAX, CTL_USD_DECIMALS);
	*out = whole * CTL_MICROS_PER_USD + frac;
	return CTL_OK;
}

/* ---- database helpers ---- */

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

/* Opens the database once; later calls find it open. */
static int ctl_db_open(struct ctl *ctl)
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
static int ctl_secret_load(const struct ctl *ctl, unsigned char secret[KEYHASH_SECRET_LEN])
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
static int ctl_begin(struct ctl *ctl)
{
	return db_begin(ctl->db) == DB_OK ? CTL_OK : ctl_db_error(ctl);
}

static int ctl_commit(struct ctl *ctl)
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

static const char *ctl_sql_of(const struct ctl *ctl, struct ctl_sql q)
{
	return db_kind(ctl->db) == DB_POSTGRES ? q.pg : q.sqlite;
}

static void ctl_rollback(struct ctl *ctl)
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

static struct db_stmt *ctl_prepare(struct ctl *ctl, const char *sql, const char *types, ...)
{
	struct db_stmt *st;
	va_list ap;

	va_start(ap, types);
	st = ctl_vprepare(ctl, sql, types, ap);
	va_end(ap);
	return st;
}

/* Runs a statement that returns no rows. Returns the number of changed rows, or -1. */
static int ctl_exec(struct ctl *ctl, const char *sql, const char *types, ...)
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
static int ctl_find(struct ctl *ctl, int64_t *id, const char *sql, const char *types, ...)
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
static int ctl_model_id(struct ctl *ctl, const char *name, int64_t *id)
{
	int found = ctl_find(ctl, id, "SELECT id FROM models WHERE name = ?1", "t", name);

	if (found == 0)
		return ctl_error("unknown model '%s' (see 'tallyctl model list')", name);
	return found == 1 ? CTL_OK : CTL_FAIL;
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
static int ctl_table_text(struct ctl *ctl, struct db_stmt *st, const struct ctl_col *cols,
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
static int ctl_json_add(cJSON *parent, const char *key, cJSON *item)
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
static int ctl_json_row(cJSON *parent, const char *key, struct db_stmt *st,
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
static int ctl_json_print(cJSON *doc, int oom)
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

/* Prints the rows of q, whose parameter ?1 (if any) is arg, with print inside one
 * read transaction. */
static int ctl_print_table(struct ctl *ctl, struct ctl_sql q, const char *arg,
                           const struct ctl_col *cols, int ncols, ctl_printer *print)
{
	struct db_stmt *st = NULL;
	int status = CTL_FAIL;

	if (ctl_db_open(ctl) != CTL_OK || ctl_begin_read(ctl) != CTL_OK)
		goto out;
	st = ctl_prepare(ctl, ctl_sql_of(ctl, q), "");
	if (!st)
		goto out;
	if (db_param_count(st) > 0 &&
	    (arg ? db_bind_text(st, 1, arg, strlen(arg)) : db_bind_null(st, 1)) < 0) {
		ctl_error("database error: cannot bind parameter 1 of a statement");
		goto out;
	}
	status = print(ctl, st, cols, ncols);
out:
	db_finalize(st);
	ctl_rollback(ctl);
	return status;
}

/* The printer of a list command: a JSON array with --json, else a text table. */
static ctl_printer *ctl_list_printer(const struct ctl_args *a)
{
	return a->val[OPT_JSON] ? ctl_table_json : ctl_table_text;
}

/* ---- key commands ---- */

/* Splits a --models value in place into *items (owned by the caller, pointing into
 * csv). Rejects empty and malformed names. */
static int ctl_split_models(const struct ctl_command *cmd, char *csv, char ***items, size_t *n)
{
	size_t count = 1, i;
	char *p;

	for (p = csv; *p; p++)
		count += *p == ',';
	*items = calloc(count, sizeof(**items));
	if (!*items)
		return ctl_error("out of memory");
	*n = count;
	for (i = 0, p = csv; i < count; i++) {
		char *comma = strchr(p, ',');

		if (comma)
			*comma = '\0';
		if (!ctl_valid_model(p))
			return ctl_usage(cmd, "invalid model name '%s' in --models", p);
		(*items)[i] = p;
		p = comma ? comma + 1 : p;
	}
	return CTL_OK;
}

static int ctl_list_has(char *const *items, size_t n, const char *s)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (strcmp(items[i], s) == 0)
			return 1;
	}
	return 0;
}

/* The options key create and key set share, validated. */
struct ctl_key_opts {
	char *csv;                          /* owned copy of --models, split in place */
	char **models;                      /* owned, into csv; NULL without --models */
	size_t nmodels;
	const char *def;                    /* --default-model; NULL: unchanged */
	const char *period;                 /* --budget-period; NULL: unchanged */
	int64_t given[CTL_NLIMITS];         /* 1 if ctl_limit_opts[i] was given */
	int64_t value[CTL_NLIMITS];
	const int64_t *bound[CTL_NLIMITS];  /* &value[i], or NULL for "none" */
	int64_t policy_given[CTL_NPOLICIES]; /* 1 if ctl_policy_opts[i] was given */
	const char *policy[CTL_NPOLICIES];  /* its value, or NULL for "inherit" */
};

static void ctl_key_opts_free(struct ctl_key_opts *o)
{
	free(o->models);
	free(o->csv);
}

/* Checks everything that needs no database. The caller frees o even on failure. */
static int ctl_key_opts_parse(const struct ctl_command *cmd, const struct ctl_args *a,
                              struct ctl_key_opts *o)
{
	size_t i;
	int status;

	if (a->val[OPT_MODELS]) {
		o->csv = strdup(a->val[OPT_MODELS]);
		if (!o->csv)
			return ctl_error("out of memory");
		status = ctl_split_models(cmd, o->csv, &o->models, &o->nmodels);
		if (status != CTL_OK)
			return status;
	}
	o->def = a->val[OPT_DEFAULT_MODEL];
	if (o->def && !ctl_valid_model(o->def))
		return ctl_usage(cmd, "invalid model name '%s' for --default-model", o->def);
	if (o->def && o->models && !ctl_list_has(o->models, o->nmodels, o->def))
		return ctl_usage(cmd, "default model '%s' is not in --models", o->def);
	for (i = 0; i < CTL_NLIMITS; i++) {
		enum ctl_opt_id id = ctl_limit_opts[i];
		const char *v = a->val[id];

		o->given[i] = v != NULL;
		/* "none" clears the limit: NULL in the database. */
		if (!v || strcmp(v, "none") == 0)
			continue;
		status = id == OPT_BUDGET_USD ?
			ctl_parse_usd(cmd, id, v, &o->value[i]) :
			ctl_parse_int(cmd, id, v, 1, CTL_LIMIT_MAX, ", or none for no limit", &o->value[i]);
		if (status != CTL_OK)
			return status;
		o->bound[i] = &o->value[i];
	}
	for (i = 0; i < CTL_NPOLICIES; i++) {
		enum ctl_opt_id id = ctl_policy_opts[i];
		const char *v = a->val[id];
		int tiers = id == OPT_SERVICE_TIERS;

		o->policy_given[i] = v != NULL;
		/* "inherit", and an empty tier list, clear the column: the agent's default. */
		if (!v || strcmp(v, "inherit") == 0 || (tiers && *v == '\0'))
			continue;
		if (tiers ? !tier_list_ok(v) :
		    strcmp(v, "priced") != 0 && strcmp(v, "allow") != 0 && strcmp(v, "deny") != 0)
			return ctl_usage(cmd, "invalid value '%s' for --%s: expected %s", v,
			                 ctl_opts[id].name, tiers ?
			                 "tier names (a-z 0-9 _ -) separated by commas, '' or inherit" :
			                 "priced, allow, deny or inherit");
		o->policy[i] = v;
	}
	o->period = a->val[OPT_BUDGET_PERIOD];
	if (o->period && strcmp(o->period, "day") != 0 && strcmp(o->period, "month") != 0 &&
	    strcmp(o->period, "total") != 0)
		return ctl_usage(cmd, "invalid value '%s' for --budget-period: expected day, month "
		                 "or total", o->period);
	return CTL_OK;
}

/* Fails unless every model named by --models and --default-model exists. */
static int ctl_key_models_exist(struct ctl *ctl, const struct ctl_key_opts *o)
{
	int64_t id;
	size_t i;

	for (i = 0; i < o->nmodels + (o->def != NULL); i++) {
		if (ctl_model_id(ctl, i < o->nmodels ? o->models[i] : o->def, &id) != CTL_OK)
			return CTL_FAIL;
	}
	return CTL_OK;
}

/* Writes the given options to key id inside the caller's transaction; options not
 * given keep the stored values. */
static int ctl_key_apply(struct ctl *ctl, int64_t id, const char *name, const struct ctl_key_opts *o)
{
	size_t i;
	int found;

	if (ctl_exec(ctl,
	             "UPDATE keys SET"
	             " rpm = CASE WHEN ?2 <> 0 THEN ?3 ELSE rpm END,"
	             " tpm = CASE WHEN ?4 <> 0 THEN ?5 ELSE tpm END,"
	             " max_concurrent = CASE WHEN ?6 <> 0 THEN ?7 ELSE max_concurrent END,"
	             " budget_micros = CASE WHEN ?8 <> 0 THEN ?9 ELSE budget_micros END,"
	             " budget_period = coalesce(?10, budget_period),"
	             " default_model = coalesce(?11, default_model),"
	             " service_tiers = CASE WHEN ?12 <> 0 THEN ?13 ELSE service_tiers END,"
	             " server_tools = CASE WHEN ?14 <> 0 THEN ?15 ELSE server_tools END,"
	             " audio = CASE WHEN ?16 <> 0 THEN ?17 ELSE audio END,"
	             " cache_writes = CASE WHEN ?18 <> 0 THEN ?19 ELSE cache_writes END"
	             " WHERE id = ?1",
	             "iininininttitititit", id, o->given[0], o->bound[0], o->given[1], o->bound[1],
	             o->given[2], o->bound[2], o->given[3], o->bound[3], o->period, o->def,
	             o->policy_given[0], o->policy[0], o->policy_given[1], o->policy[1],
	             o->policy_given[2], o->policy[2], o->policy_given[3], o->policy[3]) < 0)
		return CTL_FAIL;
	if (o->models) {
		if (ctl_exec(ctl, "DELETE FROM key_models WHERE key_id = ?1", "i", id) < 0)
			return CTL_FAIL;
		for (i = 0; i < o->nmodels; i++) {
			if (ctl_exec(ctl, "INSERT INTO key_models (key_id, model) VALUES (?1, ?2)"
			             " ON CONFLICT DO NOTHING", "it", id, o->models[i]) < 0)
				return CTL_FAIL;
		}
	}
	/* key set may change the list or the default alone: check the stored pair. */
	found = ctl_find(ctl, NULL,
	                 "SELECT 1 FROM keys k WHERE k.id = ?1 AND k.default_model IS NOT NULL"
	                 " AND EXISTS (SELECT 1 FROM key_models WHERE key_id = k.id)"
	                 " AND NOT EXISTS (SELECT 1 FROM key_models"
	                 "                 WHERE key_id = k.id AND model = k.default_model)",
	                 "i", id);
	if (found != 0)
		return found > 0 ? ctl_error("key '%s': its default model would not be in its "
		                             "allowed models (see --default-model)", name) : CTL_FAIL;
	return CTL_OK;
}

/* Inserts the key row inside the caller's transaction, its id into *id. On PostgreSQL
 * another tallyctl may have inserted the name since this one looked (both saw none):
 * the unique constraint refuses the second, which then ends its transaction and, if
 * the name is there now, reports it as the check would. */
static int ctl_key_insert(struct ctl *ctl, const char *name, const char *prefix,
                          const unsigned char hash[KEYHASH_LEN], int64_t *id)
{
	struct db_stmt *st;
	enum db_status rc;
	char err[512];

	st = ctl_prepare(ctl, "INSERT INTO keys (name, prefix, hash, created_at)"
	                 " VALUES (?1, ?2, ?3, ?4) RETURNING id",
	                 "ttbi", name, prefix, hash, (size_t)KEYHASH_LEN, db_now());
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
		if (ctl_find(ctl, NULL, "SELECT 1 FROM keys WHERE name = ?1", "t", name) == 1)
			return ctl_error("a key named '%s' already exists", name);
	}
	return ctl_error("database error: %s", err);
}

static int ctl_key_create(struct ctl *ctl, const struct ctl_args *a)
{
	const char *name = a->operand;
	unsigned char secret[KEYHASH_SECRET_LEN], hash[KEYHASH_LEN];
	char key[KEYHASH_KEY_LEN + 1], prefix[KEYHASH_PREFIX_LEN + 1];
	struct ctl_key_opts o = { 0 };
	int status, found;
	int64_t key_id = 0;

	if (!ctl_valid_name(name)) {
		status = ctl_usage(ctl->cmd, "invalid key name '%s': use 1-%d characters from "
		                   "A-Z a-z 0-9 . _ -", name, CTL_NAME_MAX);
		goto out;
	}
	status = ctl_key_opts_parse(ctl->cmd, a, &o);
	if (status != CTL_OK)
		goto out;

	status = CTL_FAIL;
	if (ctl_db_open(ctl) != CTL_OK || ctl_secret_load(ctl, secret) != CTL_OK ||
	    ctl_begin(ctl) != CTL_OK)
		goto out;
	found = ctl_find(ctl, NULL, "SELECT 1 FROM keys WHERE name = ?1", "t", name);
	if (found != 0) {
		if (found > 0)
			ctl_error("a key named '%s' already exists", name);
		goto out;
	}
	if (ctl_key_models_exist(ctl, &o) != CTL_OK)
		goto out;
	if (keyhash_generate(key, sizeof(key)) < 0 || keyhash_prefix(key, prefix, sizeof(prefix)) < 0) {
		ctl_error("cannot generate a key: no randomness available");
		goto out;
	}
	keyhash_compute(secret, key, KEYHASH_KEY_LEN, hash);
	if (ctl_key_insert(ctl, name, prefix, hash, &key_id) != CTL_OK ||
	    ctl_key_apply(ctl, key_id, name, &o) != CTL_OK || ctl_commit(ctl) != CTL_OK)
		goto out;
	/* Shown once: only the hash and the prefix are stored. */
	printf("%s\n", key);
	status = CTL_OK;
out:
	if (status != CTL_OK)
		ctl_rollback(ctl);
	OPENSSL_cleanse(secret, sizeof(secret));
	OPENSSL_cleanse(key, sizeof(key));
	OPENSSL_cleanse(hash, sizeof(hash));
	ctl_key_opts_free(&o);
	return status;
}

static int ctl_key_set(struct ctl *ctl, const struct ctl_args *a)
{
	const char *name = a->operand;
	struct ctl_key_opts o = { 0 };
	int status, found, id;
	int64_t key_id;

	for (id = 0; id < OPT_COUNT; id++) {
		if (a->val[id])
			break;
	}
	if (id == OPT_COUNT) {
		status = ctl_usage(ctl->cmd, "nothing to change: give at least one option");
		goto out;
	}
	status = ctl_key_opts_parse(ctl->cmd, a, &o);
	if (status != CTL_OK)
		goto out;

	status = CTL_FAIL;
	if (ctl_db_open(ctl) != CTL_OK || ctl_begin(ctl) != CTL_OK)
		goto out;
	found = ctl_find(ctl, &key_id, "SELECT id FROM keys WHERE name = ?1", "t", name);
	if (found != 1) {
		if (found == 0)
			ctl_error("no key named '%s'", name);
		goto out;
	}
	if (ctl_key_models_exist(ctl, &o) != CTL_OK || ctl_key_apply(ctl, key_id, name, &o) != CTL_OK ||
	    ctl_commit(ctl) != CTL_OK)
		goto out;
	printf("updated key %s\n", name);
	status = CTL_OK;
out:
	if (status != CTL_OK)
		ctl_rollback(ctl);
	ctl_key_opts_free(&o);
	return status;
}

static int ctl_key_list(struct ctl *ctl, const struct ctl_args *a)
{
	static const struct ctl_col cols[] = {
		{ "ID", "id", COL_INT },
		{ "NAME", "name", COL_TEXT },
		{ "PREFIX", "prefix", COL_TEXT },
		{ "CREATED", "created_at", COL_TIME },
		{ "REVOKED", "revoked_at", COL_TIME },
		{ "MODELS", "models", COL_LIST },
		{ "DEFAULT_MODEL", "default_model", COL_TEXT },
		{ "SERVICE_TIERS", "service_tiers", COL_CSV },
		{ "SERVER_TOOLS", "server_tools", COL_TEXT },
		{ "AUDIO", "audio", COL_TEXT },
		{ "CACHE_WRITES", "cache_writes", COL_TEXT },
		{ "RPM", "rpm", COL_INT },
		{ "TPM", "tpm", COL_INT },
		{ "MAX_CONC", "max_concurrent", COL_INT },
		{ "BUDGET_USD", "budget_micros", COL_USD },
		{ "PERIOD", "budget_period", COL_TEXT },
	};

	/* The allow-list joined in byte order: SQLite has no string_agg before 3.44, nor
	 * PostgreSQL group_concat. */
#define KEY_LIST_SQL(MODELS)                                                            \
	"SELECT k.id, k.name, k.prefix, k.created_at, k.revoked_at, " MODELS ","         \
	" k.default_model, k.service_tiers, k.server_tools, k.audio, k.cache_writes,"     \
	" k.rpm, k.tpm, k.max_concurrent, k.budget_micros, k.budget_period"               \
	" FROM keys k ORDER BY k.id"
	static const struct ctl_sql q = {
		KEY_LIST_SQL("(SELECT group_concat(model, ',') FROM"
		             " (SELECT model FROM key_models WHERE key_id = k.id ORDER BY model))"),
		KEY_LIST_SQL("(SELECT string_agg(model, ',' ORDER BY model COLLATE \"C\")"
		             " FROM key_models WHERE key_id = k.id)"),
	};
#undef KEY_LIST_SQL

	return ctl_print_table(ctl, q, NULL, cols, (int)(sizeof(cols) / sizeof(cols[0])),
	                       ctl_list_printer(a));
}

static int ctl_key_revoke(struct ctl *ctl, const struct ctl_args *a)
{
	const char *name = a->operand;
	int status = CTL_FAIL, found, changed;
	int64_t id;

	if (ctl_db_open(ctl) != CTL_OK || ctl_begin(ctl) != CTL_OK)
		goto out;
	found = ctl_find(ctl, &id, "SELECT id FROM keys WHERE name = ?1", "t", name);
	if (found != 1) {
		if (found == 0)
			ctl_error("no key named '%s'", name);
		goto out;
	}
	changed = ctl_exec(ctl, "UPDATE keys SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
	                   "ii", id, db_now());
	if (changed <= 0) {
		if (changed == 0)
			ctl_error("key '%s' is already revoked", name);
		goto out;
	}
	if (ctl_commit(ctl) != CTL_OK)
		goto out;
	printf("revoked key %s\n", name);
	status = CTL_OK;
out:
	if (status != CTL_OK)
		ctl_rollback(ctl);
	return status;
}

/* ---- rate cards: model set, prices set, list, delete ---- */

/* Parses the price options in a into c. */
static int ctl_card_parse_prices(const struct ctl_command *cmd, const struct ctl_args *a,
                                 struct ctl_card *c)
{
	int i;

	for (i = 0; i < CTL_NPRICES; i++) {
		const char *v = a->val[ctl_prices[i].opt];

		if (!v)
			continue;
		if (ctl_parse_int(cmd, ctl_prices[i].opt, v, 0, CTL_MICROS_MAX,
		                  i == CTL_PRICE_WEB_SEARCH ? " (micro-dollars per call)" :
		                  " (micro-dollars per million tokens)", &c->price[i]) != CTL_OK)
			return CTL_USAGE;
		c->known |= 1u << i;
	}
	return CTL_OK;
}

/* Parses --tier (default "default") and --above (default 0) into c. */
static int ctl_card_parse_key(const struct ctl_command *cmd, const struct ctl_args *a,
                              struct ctl_card *c)
{
	c->tier = a->val[OPT_TIER] ? a->val[OPT_TIER] : "default";
	if (!tier_name_ok(c->tier, strlen(c->tier)))
		return ctl_usage(cmd, "invalid value '%s' for --tier: use 1-%d characters from "
		                 "a-z 0-9 _ -", c->tier, TIER_NAME_MAX - 1);
	c->above = 0;
	if (!a->val[OPT_ABOVE])
		return CTL_OK;
	return ctl_parse_int(cmd, OPT_ABOVE, a->val[OPT_ABOVE], 0, CTL_TOKENS_MAX, " (prompt tokens)",
	                     &c->above);
}

/* Writes card c of model model_id inside the caller's transaction. merge: a price c
 * does not know keeps its stored value; else the card is replaced whole. 0 or -1.
 * The stored row's columns are named with their table in DO UPDATE: PostgreSQL finds
 * a bare name there ambiguous (it could be excluded's). */
static int ctl_card_write(struct ctl *ctl, int64_t model_id, const struct ctl_card *c, int merge)
{
	const int64_t *p[CTL_NPRICES];
	int i;

	_Static_assert(CTL_NPRICES == 9, "the card SQL binds nine prices in ctl_prices order");
	for (i = 0; i < CTL_NPRICES; i++)
		p[i] = c->known & (1u << i) ? &c->price[i] : NULL;
	return ctl_exec(ctl,
	                "INSERT INTO model_prices (model_id, tier, above_tokens,"
	                " input_micros_per_mtok, cached_micros_per_mtok, cache_write_micros_per_mtok,"
	                " cache_write_1h_micros_per_mtok, output_micros_per_mtok,"
	                " reasoning_micros_per_mtok, audio_input_micros_per_mtok,"
	                " audio_output_micros_per_mtok, web_search_micros_per_call)"
	                " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
	                " ON CONFLICT (model_id, tier, above_tokens) DO UPDATE SET"
	                " input_micros_per_mtok = coalesce(?4, CASE WHEN ?13 <> 0 THEN"
	                "  model_prices.input_micros_per_mtok END),"
	                " cached_micros_per_mtok = coalesce(?5, CASE WHEN ?13 <> 0 THEN"
	                "  model_prices.cached_micros_per_mtok END),"
	                " cache_write_micros_per_mtok = coalesce(?6, CASE WHEN ?13 <> 0 THEN"
	                "  model_prices.cache_write_micros_per_mtok END),"
	                " cache_write_1h_micros_per_mtok = coalesce(?7, CASE WHEN ?13 <> 0 THEN"
	                "  model_prices.cache_write_1h_micros_per_mtok END),"
	                " output_micros_per_mtok = coalesce(?8, CASE WHEN ?13 <> 0 THEN"
	                "  model_prices.output_micros_per_mtok END),"
	                " reasoning_micros_per_mtok = coalesce(?9, CASE WHEN ?13 <> 0 THEN"
	                "  model_prices.reasoning_micros_per_mtok END),"
	                " audio_input_micros_per_mtok = coalesce(?10, CASE WHEN ?13 <> 0 THEN"
	                "  model_prices.audio_input_micros_per_mtok END),"
	                " audio_output_micros_per_mtok = coalesce(?11, CASE WHEN ?13 <> 0 THEN"
	                "  model_prices.audio_output_micros_per_mtok END),"
	                " web_search_micros_per_call = coalesce(?12, CASE WHEN ?13 <> 0 THEN"
	                "  model_prices.web_search_micros_per_call END)",
	                "itinnnnnnnnni", model_id, c->tier, c->above, p[0], p[1], p[2], p[3], p[4],
	                p[5], p[6], p[7], p[8], (int64_t)merge) < 0 ? -1 : 0;
}

/* Warns, on stderr, about each card of model model_id (named name) that leaves a class
 * unpriced, as read inside the caller's transaction: the agent charges such usage at a
 * fallback rate (docs/pricing.md). Reasoning and hour-long writes are not named: unset,
 * they are priced as output and as cache writes. 0 or -1. */
static int ctl_warn_unpriced(struct ctl *ctl, int64_t model_id, const char *name)
{
	struct db_stmt *st = NULL;
	char sql[1024];
	size_t len;
	int i, rc = -1;
	enum db_status step;

	len = (size_t)snprintf(sql, sizeof(sql), "SELECT tier, above_tokens");
	for (i = 0; i < PRICE_CLASSES; i++)
		len += (size_t)snprintf(sql + len, sizeof(sql) - len, ", %s", pricecard_columns[i]);
	snprintf(sql + len, sizeof(sql) - len, " FROM model_prices WHERE model_id = ?1"
	         " ORDER BY tier, above_tokens");
	if (db_prepare(ctl->db, sql, &st) < 0 || db_bind_int(st, 1, model_id) < 0)
		goto out;
	while ((step = db_step(st)) == DB_ROW) {
		char missing[256];
		size_t n = 0;

		missing[0] = '\0';
		for (i = 0; i < PRICE_CLASSES; i++)
			if (i != PRICE_REASONING && i != PRICE_CACHE_WRITE_1H &&
			    db_col_type(st, 2 + i) == DB_NULL && n < sizeof(missing))
				n += (size_t)snprintf(missing + n, sizeof(missing) - n, "%s%s",
				                      n ? ", " : "", pricecard_names[i]);
		if (n)
			fprintf(stderr, "tallyctl: warning: model %s, card %s above %lld tokens, prices"
			        " no %s: such usage is charged at the card's dearest token rate (web"
			        " searches at $0.05 per call; docs/pricing.md)\n", name,
			        db_col_text(st, 0), (long long)db_col_int(st, 1), missing);
	}
	rc = step == DB_DONE ? 0 : -1;
out:
	if (rc < 0)
		ctl_error("cannot read the prices of model %s: %s", name, db_errmsg(ctl->db));
	db_finalize(st);
	return rc;
}

/* Opens the database, begins a write transaction and finds the model named name. */
static int ctl_begin_model(struct ctl *ctl, const char *name, int64_t *id)
{
	if (ctl_db_open(ctl) != CTL_OK || ctl_begin(ctl) != CTL_OK)
		return CTL_FAIL;
	return ctl_model_id(ctl, name, id);
}

static int ctl_model_set(struct ctl *ctl, const struct ctl_args *a)
{
	const char *name = a->operand, *provider = a->val[OPT_PROVIDER];
	struct ctl_card card = { .tier = "default" };
	int64_t provider_id, model_id, max_output = 0;
	int status = CTL_FAIL, found, existed;

	if (!ctl_valid_model(name))
		return ctl_usage(ctl->cmd, "invalid model name '%s': use 1-%d characters from "
		                 "A-Z a-z 0-9 . _ - : / @ +", name, CTL_MODEL_MAX);
	/* The prices go to the default card for every prompt size; one not given stays
	 * unknown on a new card, unchanged on an existing one. */
	if (ctl_card_parse_prices(ctl->cmd, a, &card) != CTL_OK)
		return CTL_USAGE;
	if (a->val[OPT_MAX_OUTPUT] && strcmp(a->val[OPT_MAX_OUTPUT], "none") != 0 &&
	    ctl_parse_int(ctl->cmd, OPT_MAX_OUTPUT, a->val[OPT_MAX_OUTPUT], 1, CTL_TOKENS_MAX,
	                  " (tokens, or none)", &max_output) != CTL_OK)
		return CTL_USAGE;

	if (ctl_db_open(ctl) != CTL_OK || ctl_begin(ctl) != CTL_OK)
		goto out;
	found = ctl_find(ctl, &provider_id, "SELECT id FROM providers WHERE name = ?1", "t", provider);
	if (found != 1) {
		if (found == 0)
			ctl_error("unknown provider '%s' (see 'tallyctl provider list')", provider);
		goto out;
	}
	existed = ctl_find(ctl, NULL, "SELECT 1 FROM models WHERE name = ?1", "t", name);
	if (existed < 0 ||
	    ctl_exec(ctl,
	             "INSERT INTO models (name, provider_id, created_at, updated_at)"
	             " VALUES (?1, ?2, ?3, ?3)"
	             " ON CONFLICT (name) DO UPDATE SET provider_id = excluded.provider_id,"
	             " updated_at = excluded.updated_at",
	             "tii", name, provider_id, db_now()) < 0)
		goto out;
	if (a->val[OPT_MAX_OUTPUT] &&
	    ctl_exec(ctl, "UPDATE models SET max_output = ?2 WHERE name = ?1", "tn", name,
	             max_output ? &max_output : NULL) < 0)
		goto out;
	/* Without prices a new model has no card: unpriced until it gets one. */
	if (card.known && (ctl_model_id(ctl, name, &model_id) != CTL_OK ||
	                   ctl_card_write(ctl, model_id, &card, 1) < 0 ||
	                   ctl_warn_unpriced(ctl, model_id, name) < 0))
		goto out;
	if (ctl_commit(ctl) != CTL_OK)
		goto out;
	printf("%s model %s\n", existed ? "updated" : "created", name);
	status = CTL_OK;
out:
	if (status != CTL_OK)
		ctl_rollback(ctl);
	return status;
}

static int ctl_model_list(struct ctl *ctl, const struct ctl_args *a)
{
	static const struct ctl_col cols[] = {
		{ "ID", "id", COL_INT },
		{ "NAME", "name", COL_TEXT },
		{ "PROVIDER", "provider", COL_TEXT },
		{ "INPUT_MICROS", "input_micros_per_mtok", COL_INT },
		{ "OUTPUT_MICROS", "output_micros_per_mtok", COL_INT },
		{ "CACHED_MICROS", "cached_micros_per_mtok", COL_INT },
		{ "CACHE_WRITE_MICROS", "cache_write_micros_per_mtok", COL_INT },
		{ "CARDS", "price_cards", COL_INT },
		{ "CREATED", "created_at", COL_TIME },
		{ "UPDATED", "updated_at", COL_TIME },
	};

	/* The prices model set writes: the default card for every prompt size. */
#define MODEL_LIST_SQL(C)                                                               \
	"SELECT m.id, m.name, p.name, c.input_micros_per_mtok,"                           \
	" c.output_micros_per_mtok, c.cached_micros_per_mtok,"                            \
	" c.cache_write_micros_per_mtok,"                                                 \
	" (SELECT count(*) FROM model_prices WHERE model_id = m.id),"                     \
	" m.created_at, m.updated_at"                                                     \
	" FROM models m JOIN providers p ON p.id = m.provider_id"                         \
	" LEFT JOIN model_prices c ON c.model_id = m.id AND c.tier = 'default'"           \
	"  AND c.above_tokens = 0"                                                        \
	" ORDER BY m.name" C
	return ctl_print_table(ctl, CTL_SQL(MODEL_LIST_SQL), NULL, cols,
	                       (int)(sizeof(cols) / sizeof(cols[0])), ctl_list_printer(a));
#undef MODEL_LIST_SQL
}

static int ctl_prices_set(struct ctl *ctl, const struct ctl_args *a)
{
	struct ctl_card card = { 0 };
	int64_t model_id;
	int status, existed;

	status = ctl_card_parse_key(ctl->cmd, a, &card);
	if (status == CTL_OK)
		status = ctl_card_parse_prices(ctl->cmd, a, &card);
	if (status != CTL_OK)
		return status;
	if (!card.known)
		return ctl_usage(ctl->cmd, "nothing to set: give at least one price");

	status = CTL_FAIL;
	if (ctl_begin_model(ctl, a->operand, &model_id) != CTL_OK)
		goto out;
	existed = ctl_find(ctl, NULL, "SELECT 1 FROM model_prices WHERE model_id = ?1 AND tier = ?2"
	                   " AND above_tokens = ?3", "iti", model_id, card.tier, card.above);
	if (existed < 0 || ctl_card_write(ctl, model_id, &card, 1) < 0 ||
	    ctl_warn_unpriced(ctl, model_id, a->operand) < 0 || ctl_commit(ctl) != CTL_OK)
		goto out;
	printf("%s card of model %s: tier %s above %lld tokens\n", existed ? "updated" : "created",
	       a->operand, card.tier, (long long)card.above);
	status = CTL_OK;
out:
	if (status != CTL_OK)
		ctl_rollback(ctl);
	return status;
}

static int ctl_prices_delete(struct ctl *ctl, const struct ctl_args *a)
{
	struct ctl_card card = { 0 };
	int64_t model_id;
	int status, changed;

	status = ctl_card_parse_key(ctl->cmd, a, &card);
	if (status != CTL_OK)
		return status;
	status = CTL_FAIL;
	if (ctl_begin_model(ctl, a->operand, &model_id) != CTL_OK)
		goto out;
	changed = ctl_exec(ctl, "DELETE FROM model_prices WHERE model_id = ?1 AND tier = ?2"
	                   " AND above_tokens = ?3", "iti", model_id, card.tier, card.above);
	if (changed <= 0) {
		if (changed == 0)
			ctl_error("model %s has no card of tier %s above %lld tokens (see 'tallyctl "
			          "prices list %s')", a->operand, card.tier, (long long)card.above, a->operand);
		goto out;
	}
	if (ctl_commit(ctl) != CTL_OK)
		goto out;
	printf("deleted card of model %s: tier %s above %lld tokens\n", a->operand, card.tier,
	       (long long)card.above);
	status = CTL_OK;
out:
	if (status != CTL_OK)
		ctl_rollback(ctl);
	return status;
}

/* prices list --json: the tally import format, {"models": {"NAME": [card, ...]}}, from
 * rows of the model's name then the card's columns, ordered by name. */
static int ctl_prices_json(struct ctl *ctl, struct db_stmt *st, const struct ctl_col *cols,
                           int ncols)
{
	cJSON *doc = cJSON_CreateObject(), *models = cJSON_CreateObject(), *cards = NULL;
	int oom = ctl_json_add(doc, "models", models) < 0;
	enum db_status rc = DB_DONE;
	const char *name;

	while (!oom && (rc = db_step(st)) == DB_ROW) {
		name = db_col_text(st, 0);
		if (!name) {
			oom = 1;
			break;
		}
		if (!cards || strcmp(cards->string, name) != 0) {
			cards = cJSON_CreateArray();
			oom = ctl_json_add(models, name, cards) < 0;
		}
		oom = oom || ctl_json_row(cards, NULL, st, cols, 1, ncols) < 0;
	}
	if (!oom && rc != DB_DONE) {
		cJSON_Delete(doc);
		return ctl_db_error(ctl);
	}
	return ctl_json_print(doc, oom);
}

static int ctl_prices_list(struct ctl *ctl, const struct ctl_args *a)
{
	struct ctl_col cols[3 + CTL_NPRICES] = {
		{ "MODEL", "model", COL_TEXT },
		{ "TIER", "tier", COL_TEXT },
		{ "ABOVE", "above_tokens", COL_INT },
	};
	int64_t id;
	int i;

	for (i = 0; i < CTL_NPRICES; i++)
		cols[3 + i] = (struct ctl_col){ ctl_prices[i].header, pricecard_columns[i], COL_INT };
	if (a->operand && (ctl_db_open(ctl) != CTL_OK || ctl_model_id(ctl, a->operand, &id) != CTL_OK))
		return CTL_FAIL;
	/* The price columns in ctl_prices order; the default tier first. The CAST gives
	 * PostgreSQL the parameter's type, which IS NULL alone does not. */
#define PRICES_LIST_SQL(C)                                                              \
	"SELECT m.name, c.tier, c.above_tokens, c.input_micros_per_mtok,"                 \
	" c.cached_micros_per_mtok, c.cache_write_micros_per_mtok,"                       \
	" c.cache_write_1h_micros_per_mtok, c.output_micros_per_mtok,"                    \
	" c.reasoning_micros_per_mtok, c.audio_input_micros_per_mtok,"                    \
	" c.audio_output_micros_per_mtok, c.web_search_micros_per_call"                   \
	" FROM model_prices c JOIN models m ON m.id = c.model_id"                         \
	" WHERE CAST(?1 AS TEXT) IS NULL OR m.name = ?1"                                  \
	" ORDER BY m.name" C ", c.tier <> 'default', c.tier" C ", c.above_tokens"
	return ctl_print_table(ctl, CTL_SQL(PRICES_LIST_SQL), a->operand, cols, 3 + CTL_NPRICES,
	                       a->val[OPT_JSON] ? ctl_prices_json : ctl_table_text);
#undef PRICES_LIST_SQL
}

/* ---- prices import ---- */

#define CTL_LITELLM_SEARCH        "search_context_cost_per_query"
#define CTL_LITELLM_SEARCH_MEDIUM "search_context_size_medium"
#define CTL_LITELLM_SAMPLE        "sample_spec"   /* the file's template, not a model */

struct ctl_import {
	struct ctl *ctl;
	const char *file;
	int litellm;                  /* --format litellm */
	const cJSON *entries;         /* the file's models, keyed by name */
	const char *entry;            /* the name of the entry being read, for messages */
	cJSON *used;                  /* entries some configured model took, by name */
	cJSON *seen;                  /* unmapped fields of the entry being read */
	cJSON *report;                /* what is printed, text or JSON */
	struct ctl_card cards[CTL_CARDS_MAX];
	int ncards;
};

static int ctl_import_oom(void)
{
	ctl_error("out of memory");
	return -1;
}

/* Reports a bad value of field in the current entry. Returns -1. */
static int ctl_import_bad(const struct ctl_import *imp, const char *field, const char *expected)
{
	ctl_error("%s: model '%s': %s: expected %s", imp->file, imp->entry, field, expected);
	return -1;
}

/* Exact micro-dollars of v dollars times 10^scale (12: per token to per million tokens;
 * 6: per call), rounded to the nearest integer, halves up. Doubles do not hold 3e-06
 * exactly, so v is read back as the shortest decimal that parses to it, which is the
 * file's own text for every number of up to 15 significant digits, and that decimal is
 * scaled in integers. 0, or -1 if v is negative, not finite or above CTL_MICROS_MAX. */
static int ctl_dollars_to_micros(double v, int scale, int64_t *out)
{
	char text[32], *p;
	int64_t m = 0, div = 1;
	int prec, digits = 0, exp;

	if (!isfinite(v) || v < 0)
		return -1;
	if (v == 0) {   /* -0 too, which would print a sign */
		*out = 0;
		return 0;
	}
	for (prec = 0; prec < 17; prec++) {   /* "%.16e" always reads back exactly */
		snprintf(text, sizeof(text), "%.*e", prec, v);
		if (strtod(text, NULL) == v)
			break;
	}
	/* text is D.DDDe[+-]XX: at most 17 digits, which int64 holds. */
	for (p = text; *p != 'e'; p++) {
		if (*p != '.') {
			m = m * 10 + (*p - '0');
			digits++;
		}
	}
	exp = atoi(p + 1) - (digits - 1) + scale;
	for (; exp > 0; exp--) {
		if (m > CTL_MICROS_MAX)
			return -1;
		m *= 10;
	}
	if (exp < -18)   /* m < 10^17: under a tenth */
		m = 0;
	for (; exp < 0; exp++)
		div *= 10;
	m = (m + div / 2) / div;
	if (m > CTL_MICROS_MAX)
		return -1;
	*out = m;
	return 0;
}

/* A tally-format integer: 0..max, integral. 0 or -1 (reported). */
static int ctl_import_int(const struct ctl_import *imp, const cJSON *item, const char *field,
                          int64_t max, int64_t *out)
{
	char expected[64];
	double v = item->valuedouble;

	if (!cJSON_IsNumber(item) || !isfinite(v) || v < 0 || v > (double)max ||
	    v != (double)(int64_t)v) {
		snprintf(expected, sizeof(expected), "an integer from 0 to %lld", (long long)max);
		return ctl_import_bad(imp, field, expected);
	}
	*out = (int64_t)v;
	return 0;
}

/* A LiteLLM price in dollars, as micro-dollars scaled by 10^scale. 0 or -1 (reported). */
static int ctl_import_dollars(const struct ctl_import *imp, const cJSON *item, const char *field,
                              int scale, int64_t *out)
{
	if (!cJSON_IsNumber(item) || ctl_dollars_to_micros(item->valuedouble, scale, out) < 0)
		return ctl_import_bad(imp, field, scale == 12 ?
		                      "a non-negative finite number of dollars per token, below $1" :
		                      "a non-negative finite number of dollars, below $1000000");
	return 0;
}

/* Counts field as unmapped, once per entry. 0 or -1 (out of memory). */
static int ctl_import_unmapped(struct ctl_import *imp, const char *field)
{
	cJSON *fields = cJSON_GetObjectItemCaseSensitive(imp->report, "unmapped_fields"), *n;

	if (cJSON_GetObjectItemCaseSensitive(imp->seen, field))
		return 0;
	if (ctl_json_add(imp->seen, field, cJSON_CreateTrue()) < 0)
		return -1;
	n = cJSON_GetObjectItemCaseSensitive(fields, field);
	if (!n)
		return ctl_json_add(fields, field, cJSON_CreateNumber(1));
	cJSON_SetNumberValue(n, n->valuedouble + 1);
	return 0;
}

/* The card (tier, above) of the entry being read, added without prices if new; NULL
 * (reported) if there are too many. */
static struct ctl_card *ctl_import_card(struct ctl_import *imp, const char *tier, int64_t above)
{
	struct ctl_card *c;
	int i;

	for (i = 0; i < imp->ncards; i++) {
		if (imp->cards[i].above == above && strcmp(imp->cards[i].tier, tier) == 0)
			return &imp->cards[i];
	}
	if (imp->ncards == CTL_CARDS_MAX) {
		ctl_import_bad(imp, tier, "at most " CTL_STR(CTL_CARDS_MAX) " rate cards");
		return NULL;
	}
	c = &imp->cards[imp->ncards++];
	*c = (struct ctl_card){ .tier = tier, .above = above };
	return c;
}

/* s[0..n) ends with suffix. */
static int ctl_ends_with(const char *s, size_t n, const char *suffix)
{
	size_t len = strlen(suffix);

	return n >= len && memcmp(s + n - len, suffix, len) == 0;
}

/* Splits a LiteLLM key, <price>[_above_<N>k_tokens][_priority|_flex], into the index
 * of its price in ctl_prices, its tier and its prompt size. -1: not a price mapped. */
static int ctl_litellm_key(const char *key, const char **tier, int64_t *above)
{
	size_t n = strlen(key), d;
	int i;

	*tier = "default";
	if (ctl_ends_with(key, n, "_priority")) {
		*tier = "priority";
		n -= strlen("_priority");
	} else if (ctl_ends_with(key, n, "_flex")) {
		*tier = "flex";
		n -= strlen("_flex");
	}
	*above = 0;
	if (ctl_ends_with(key, n, "k_tokens")) {
		d = n - strlen("k_tokens");
		while (d > 0 && key[d - 1] >= '0' && key[d - 1] <= '9')
			d--;
		/* At most 9 digits: thousands of tokens below CTL_TOKENS_MAX. */
		if (d < n - strlen("k_tokens") && n - strlen("k_tokens") - d <= 9 &&
		    ctl_ends_with(key, d, "_above_")) {
			ctl_scan_digits(key + d, CTL_TOKENS_MAX, above);
			*above *= 1000;
			n = d - strlen("_above_");
		}
	}
	for (i = 0; i < CTL_NPRICES; i++) {
		if (ctl_prices[i].litellm && strlen(ctl_prices[i].litellm) == n &&
		    memcmp(ctl_prices[i].litellm, key, n) == 0)
			return i;
	}
	return -1;
}

/* Reads a LiteLLM entry into imp->cards. 0 or -1 (reported). */
static int ctl_import_litellm(struct ctl_import *imp, const cJSON *entry)
{
	const cJSON *m, *sub;
	struct ctl_card *c;
	char field[256];
	int64_t search = 0, v, above;
	int i, has_search = 0;
	const char *tier;

	if (!cJSON_IsObject(entry))
		return ctl_import_bad(imp, "its value", "an object");
	cJSON_ArrayForEach(m, entry) {
		if (strcmp(m->string, CTL_LITELLM_SEARCH) == 0 && !cJSON_IsNull(m)) {
			if (!cJSON_IsObject(m))
				return ctl_import_bad(imp, m->string, "an object of dollars per search");
			cJSON_ArrayForEach(sub, m) {
				snprintf(field, sizeof(field), "%s.%s", m->string, sub->string);
				if (strcmp(sub->string, CTL_LITELLM_SEARCH_MEDIUM) != 0) {
					if (ctl_import_unmapped(imp, field) < 0)
						return ctl_import_oom();
				} else if (!cJSON_IsNull(sub)) {
					if (ctl_import_dollars(imp, sub, field, 6, &search) < 0)
						return -1;
					has_search = 1;
				}
			}
			continue;
		}
		i = ctl_litellm_key(m->string, &tier, &above);
		if (i < 0) {
			if (strstr(m->string, "cost") && ctl_import_unmapped(imp, m->string) < 0)
				return ctl_import_oom();
			continue;
		}
		if (cJSON_IsNull(m))
			continue;
		if (ctl_import_dollars(imp, m, m->string, 12, &v) < 0 ||
		    !(c = ctl_import_card(imp, tier, above)))
			return -1;
		c->price[i] = v;
		c->known |= 1u << i;
	}
	/* A search costs the same at every tier and prompt size: on each card. */
	if (has_search && !ctl_import_card(imp, "default", 0))
		return -1;
	for (i = 0; has_search && i < imp->ncards; i++) {
		imp->cards[i].price[CTL_PRICE_WEB_SEARCH] = search;
		imp->cards[i].known |= 1u << CTL_PRICE_WEB_SEARCH;
	}
	return 0;
}

/* Reads a tally-format entry, an array of cards, into imp->cards. 0 or -1 (reported). */
static int ctl_import_tally(struct ctl_import *imp, const cJSON *entry)
{
	const cJSON *card, *m;
	struct ctl_card *c;
	const char *tier;
	int64_t above;
	int i, n;

	if (!cJSON_IsArray(entry))
		return ctl_import_bad(imp, "its value", "an array of rate cards");
	cJSON_ArrayForEach(card, entry) {
		if (!cJSON_IsObject(card))
			return ctl_import_bad(imp, "a rate card", "an object");
		m = cJSON_GetObjectItemCaseSensitive(card, "tier");
		tier = m ? cJSON_GetStringValue(m) : "default";
		if (!tier || !tier_name_ok(tier, strlen(tier)))
			return ctl_import_bad(imp, "tier", "1-23 characters from a-z 0-9 _ -");
		m = cJSON_GetObjectItemCaseSensitive(card, "above_tokens");
		above = 0;
		if (m && ctl_import_int(imp, m, "above_tokens", CTL_TOKENS_MAX, &above) < 0)
			return -1;
		n = imp->ncards;
		if (!(c = ctl_import_card(imp, tier, above)))
			return -1;
		if (imp->ncards == n)
			return ctl_import_bad(imp, tier, "one rate card per tier and above_tokens");
		cJSON_ArrayForEach(m, card) {
			if (strcmp(m->string, "tier") == 0 || strcmp(m->string, "above_tokens") == 0)
				continue;
			for (i = 0; i < CTL_NPRICES && strcmp(pricecard_columns[i], m->string) != 0; i++)
				;
			if (i == CTL_NPRICES) {
				if (ctl_import_unmapped(imp, m->string) < 0)
					return ctl_import_oom();
			} else if (!cJSON_IsNull(m)) {
				if (ctl_import_int(imp, m, m->string, CTL_MICROS_MAX, &c->price[i]) < 0)
					return -1;
				c->known |= 1u << i;
			}
		}
	}
	return 0;
}

/* Appends the string s (or, with s2, the object {"model": s, "entry": s2}) to the
 * report's array member. 0 or -1 (out of memory). */
static int ctl_import_note(struct ctl_import *imp, const char *member, const char *s,
                           const char *s2)
{
	cJSON *arr = cJSON_GetObjectItemCaseSensitive(imp->report, member), *o;

	if (!s2)
		return ctl_json_add(arr, NULL, cJSON_CreateString(s));
	o = cJSON_CreateObject();
	if (ctl_json_add(arr, NULL, o) < 0 || ctl_json_add(o, "model", cJSON_CreateString(s)) < 0)
		return -1;
	return ctl_json_add(o, "entry", cJSON_CreateString(s2));
}

/* The file's entry for the configured model name into *out: the entry of that name,
 * else (LiteLLM) the only one named PREFIX/name, else NULL; notes in the report how it
 * was found or why not. 0 or -1 (out of memory). */
static int ctl_import_entry(struct ctl_import *imp, const char *name, const cJSON **out)
{
	const cJSON *e, *found = cJSON_GetObjectItemCaseSensitive(imp->entries, name);
	size_t n = strlen(name), len;
	int candidates = 0;

	*out = found;
	if (found)
		return 0;
	for (e = imp->litellm ? imp->entries->child : NULL; e; e = e->next) {
		len = strlen(e->string);
		if (len > n && e->string[len - n - 1] == '/' && strcmp(e->string + len - n, name) == 0) {
			found = e;
			candidates++;
		}
	}
	if (candidates > 1)
		return ctl_import_note(imp, "ambiguous", name, NULL);
	if (!found)
		return ctl_import_note(imp, "not_in_file", name, NULL);
	*out = found;
	return ctl_import_note(imp, "prefix_matches", name, found->string);
}

/* Adds n to the report's number member. */
static void ctl_import_count(struct ctl_import *imp, const char *member, int n)
{
	cJSON *item = cJSON_GetObjectItemCaseSensitive(imp->report, member);

	cJSON_SetNumberValue(item, item->valuedouble + n);
}

/* Reads the entry of configured model id, name and writes its cards. 0 or -1 (reported). */
static int ctl_import_model(struct ctl_import *imp, int64_t id, const char *name)
{
	const cJSON *entry;
	int i;

	if (ctl_import_entry(imp, name, &entry) < 0)
		return ctl_import_oom();
	if (!entry)
		return 0;
	imp->entry = entry->string;
	imp->ncards = 0;
	cJSON_Delete(imp->seen);
	imp->seen = cJSON_CreateObject();
	if (!imp->seen || (!cJSON_GetObjectItemCaseSensitive(imp->used, entry->string) &&
	                   ctl_json_add(imp->used, entry->string, cJSON_CreateTrue()) < 0))
		return ctl_import_oom();
	if ((imp->litellm ? ctl_import_litellm(imp, entry) : ctl_import_tally(imp, entry)) < 0)
		return -1;
	if (imp->ncards == 0)
		return ctl_import_note(imp, "no_mapped_prices", name, NULL) < 0 ? ctl_import_oom() : 0;
	for (i = 0; i < imp->ncards; i++) {
		if (ctl_card_write(imp->ctl, id, &imp->cards[i], 0) < 0)
			return -1;
	}
	if (ctl_warn_unpriced(imp->ctl, id, name) < 0)
		return -1;
	ctl_import_count(imp, "models_priced", 1);
	ctl_import_count(imp, "cards_written", imp->ncards);
	return 0;
}

/* The report's skeleton: every member, empty. 0 or -1 (out of memory). */
static int ctl_import_report_new(struct ctl_import *imp, const char *format, int dry_run)
{
	static const char *const lists[] = { "prefix_matches", "ambiguous", "no_mapped_prices",
	                                     "not_in_file", "not_configured" };
	size_t i;

	imp->used = cJSON_CreateObject();
	imp->report = cJSON_CreateObject();
	if (!imp->used || ctl_json_add(imp->report, "file", cJSON_CreateString(imp->file)) < 0 ||
	    ctl_json_add(imp->report, "format", cJSON_CreateString(format)) < 0 ||
	    ctl_json_add(imp->report, "dry_run", cJSON_CreateBool(dry_run)) < 0 ||
	    ctl_json_add(imp->report, "models_priced", cJSON_CreateNumber(0)) < 0 ||
	    ctl_json_add(imp->report, "cards_written", cJSON_CreateNumber(0)) < 0)
		return -1;
	for (i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
		if (ctl_json_add(imp->report, lists[i], cJSON_CreateArray()) < 0)
			return -1;
	}
	return ctl_json_add(imp->report, "unmapped_fields", cJSON_CreateObject());
}

/* The report as text: counts, and the names of the lists marked always (the others
 * with --verbose). */
static void ctl_import_print(const cJSON *report, int verbose)
{
	static const struct {
		const char *member, *label;
		int always;
	} lists[] = {
		{ "prefix_matches", "matched after a provider prefix", 1 },
		{ "ambiguous", "not priced, several provider-prefixed entries", 1 },
		{ "no_mapped_prices", "configured, without a price this format maps", 1 },
		{ "not_in_file", "configured, not in the file", 0 },
		{ "not_configured", "in the file, not configured", 0 },
	};
	const cJSON *list, *e;
	size_t i;

	printf("prices import %s (%s)%s\n", cJSON_GetObjectItemCaseSensitive(report, "file")->valuestring,
	       cJSON_GetObjectItemCaseSensitive(report, "format")->valuestring,
	       cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(report, "dry_run")) ?
	       ": dry run, nothing written" : "");
	printf("models priced: %d\ncards written: %d\n",
	       (int)cJSON_GetObjectItemCaseSensitive(report, "models_priced")->valuedouble,
	       (int)cJSON_GetObjectItemCaseSensitive(report, "cards_written")->valuedouble);
	for (i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
		list = cJSON_GetObjectItemCaseSensitive(report, lists[i].member);
		printf("%s: %d\n", lists[i].label, cJSON_GetArraySize(list));
		if (!lists[i].always && !verbose)
			continue;
		cJSON_ArrayForEach(e, list) {
			if (cJSON_IsString(e))
				printf("  %s\n", e->valuestring);
			else
				printf("  %s <- %s\n",
				       cJSON_GetObjectItemCaseSensitive(e, "model")->valuestring,
				       cJSON_GetObjectItemCaseSensitive(e, "entry")->valuestring);
		}
	}
	list = cJSON_GetObjectItemCaseSensitive(report, "unmapped_fields");
	printf("unmapped price fields: %d\n", cJSON_GetArraySize(list));
	cJSON_ArrayForEach(e, list)
		printf("  %s: %d model%s\n", e->string, (int)e->valuedouble, e->valuedouble == 1 ? "" : "s");
}

/* Reads path whole and NUL-terminated into *out (the caller frees it). */
static int ctl_read_file(const char *path, char **out, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL, *grown;
	size_t cap = 0;
	int status = CTL_FAIL;

	*len = 0;
	if (!f)
		return ctl_error("cannot open %s: %s", path, strerror(errno));
	do {
		if (cap - *len < 2) {
			if (cap >= (size_t)CTL_IMPORT_MAX) {
				ctl_error("%s: larger than %ld bytes", path, CTL_IMPORT_MAX);
				goto out;
			}
			cap = cap ? cap * 2 : 65536;
			grown = realloc(buf, cap);
			if (!grown) {
				ctl_error("out of memory");
				goto out;
			}
			buf = grown;
		}
		*len += fread(buf + *len, 1, cap - *len - 1, f);
	} while (!feof(f) && !ferror(f));
	if (ferror(f)) {
		ctl_error("cannot read %s: %s", path, strerror(errno));
		goto out;
	}
	buf[*len] = '\0';
	*out = buf;
	buf = NULL;
	status = CTL_OK;
out:
	free(buf);
	fclose(f);
	return status;
}

/* Parses the file of imp into *root and finds its models in imp->entries. */
static int ctl_import_parse(struct ctl_import *imp, cJSON **root)
{
	const char *end = NULL, *p;
	char *text = NULL;
	size_t len;
	int line = 1, status = CTL_FAIL;

	if (ctl_read_file(imp->file, &text, &len) != CTL_OK)
		return CTL_FAIL;
	if (strlen(text) != len) {
		ctl_error("%s: malformed JSON: a NUL byte at byte %zu", imp->file, strlen(text));
		goto out;
	}
	*root = cJSON_ParseWithOpts(text, &end, 1);
	if (!*root) {
		for (p = text; end && p < end; p++)
			line += *p == '\n';
		ctl_error("%s: malformed JSON at line %d (byte %ld)", imp->file, line,
		          end ? (long)(end - text) : 0L);
		goto out;
	}
	imp->entries = imp->litellm ? *root : cJSON_GetObjectItemCaseSensitive(*root, "models");
	if (!cJSON_IsObject(imp->entries)) {
		ctl_error(imp->litellm ? "%s: expected a JSON object keyed by model name" :
		          "%s: expected {\"models\": {\"NAME\": [card, ...]}} (a LiteLLM file needs "
		          "--format litellm)", imp->file);
		goto out;
	}
	status = CTL_OK;
out:
	free(text);
	return status;
}

/* The configured models, by name, into *out (the caller frees each name and out),
 * read whole before any card is written: a PostgreSQL connection runs one statement at
 * a time, so none may stay open while another runs. */
struct ctl_model {
	int64_t id;
	char *name;
};

static int ctl_models_read(struct ctl *ctl, struct ctl_model **out, size_t *n)
{
#define MODELS_SQL(C) "SELECT id, name FROM models ORDER BY name" C
	struct db_stmt *st = ctl_prepare(ctl, ctl_sql_of(ctl, CTL_SQL(MODELS_SQL)), "");
#undef MODELS_SQL
	struct ctl_model *grown;
	enum db_status rc = DB_DONE;
	const char *name;
	size_t cap = 0;
	int status = CTL_FAIL;

	*out = NULL;
	*n = 0;
	if (!st)
		return CTL_FAIL;
	while ((rc = db_step(st)) == DB_ROW) {
		if (*n == cap) {
			cap = cap ? cap * 2 : 64;
			grown = realloc(*out, cap * sizeof(**out));
			if (!grown) {
				ctl_error("out of memory");
				goto out;
			}
			*out = grown;
		}
		(*out)[*n].id = db_col_int(st, 0);
		name = db_col_text(st, 1);
		(*out)[*n].name = strdup(name ? name : "");
		if (!(*out)[*n].name) {
			ctl_error("out of memory");
			goto out;
		}
		++*n;
	}
	if (rc != DB_DONE) {
		ctl_db_error(ctl);
		goto out;
	}
	status = CTL_OK;
out:
	db_finalize(st);
	return status;
}

static void ctl_models_free(struct ctl_model *models, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		free(models[i].name);
	free(models);
}

static int ctl_prices_import(struct ctl *ctl, const struct ctl_args *a)
{
	const char *format = a->val[OPT_FORMAT] ? a->val[OPT_FORMAT] : "tally";
	struct ctl_import imp = { .ctl = ctl, .file = a->operand };
	struct ctl_model *models = NULL;
	size_t nmodels = 0, i;
	cJSON *root = NULL;
	const cJSON *e;
	int status = CTL_FAIL;

	if (strcmp(format, "tally") != 0 && strcmp(format, "litellm") != 0)
		return ctl_usage(ctl->cmd, "invalid value '%s' for --format: expected tally or litellm",
		                 format);
	imp.litellm = strcmp(format, "litellm") == 0;
	if (ctl_import_parse(&imp, &root) != CTL_OK)
		goto out;
	if (ctl_import_report_new(&imp, format, a->val[OPT_DRY_RUN] != NULL) < 0) {
		ctl_import_oom();
		goto out;
	}
	/* One transaction: every card of the file, or none. */
	if (ctl_db_open(ctl) != CTL_OK || ctl_begin(ctl) != CTL_OK)
		goto out;
	if (ctl_models_read(ctl, &models, &nmodels) != CTL_OK)
		goto out;
	for (i = 0; i < nmodels; i++) {
		if (ctl_import_model(&imp, models[i].id, models[i].name) < 0)
			goto out;
	}
	cJSON_ArrayForEach(e, imp.entries) {
		if ((imp.litellm && strcmp(e->string, CTL_LITELLM_SAMPLE) == 0) ||
		    cJSON_GetObjectItemCaseSensitive(imp.used, e->string))
			continue;
		if (ctl_import_note(&imp, "not_configured", e->string, NULL) < 0) {
			ctl_import_oom();
			goto out;
		}
	}
	if (a->val[OPT_DRY_RUN])
		ctl_rollback(ctl);
	else if (ctl_commit(ctl) != CTL_OK)
		goto out;
	if (a->val[OPT_JSON]) {
		status = ctl_json_print(imp.report, 0);
		imp.report = NULL;
	} else {
		ctl_import_print(imp.report, a->val[OPT_VERBOSE] != NULL);
		status = CTL_OK;
	}
out:
	ctl_models_free(models, nmodels);
	if (status != CTL_OK)
		ctl_rollback(ctl);
	cJSON_Delete(root);
	cJSON_Delete(imp.used);
	cJSON_Delete(imp.seen);
	cJSON_Delete(imp.report);
	return status;
}

/* ---- provider commands ---- */

static int ctl_provider_set(struct ctl *ctl, const struct ctl_args *a)
{
	const char *name = a->operand, *api = a->val[OPT_API];
	const char *backend = a->val[OPT_BACKEND], *url = a->val[OPT_URL];
	int status = CTL_FAIL, existed;

	if (!ctl_valid_name(name))
		return ctl_usage(ctl->cmd, "invalid provider name '%s': use 1-%d characters from "
		                 "A-Z a-z 0-9 . _ -", name, CTL_NAME_MAX);
	if (strcmp(api, "openai") != 0 && strcmp(api, "anthropic") != 0)
		return ctl_usage(ctl->cmd, "invalid value '%s' for --api: expected openai or anthropic", api);
	if (!ctl_valid_backend(backend))
		return ctl_usage(ctl->cmd, "invalid backend name '%s': use 1-%d characters from "
		                 "A-Z a-z 0-9 . _ - :", backend, CTL_MODEL_MAX);
	if (url && *url && !ctl_valid_url(url))
		return ctl_usage(ctl->cmd, "invalid --url '%s': expected an http:// or https:// URL "
		                 "without spaces", url);

	if (ctl_db_open(ctl) != CTL_OK || ctl_begin(ctl) != CTL_OK)
		goto out;
	existed = ctl_find(ctl, NULL, "SELECT 1 FROM providers WHERE name = ?1", "t", name);
	/* --url absent keeps the stored URL; --url '' clears it. */
	if (existed < 0 ||
	    ctl_exec(ctl,
	             "INSERT INTO providers (name, api, backend, base_url, created_at)"
	             " VALUES (?1, ?2, ?3, nullif(?4, ''), ?5)"
	             " ON CONFLICT (name) DO UPDATE SET api = excluded.api, backend = excluded.backend,"
	             " base_url = CASE WHEN CAST(?4 AS TEXT) IS NULL THEN providers.base_url"
	             " ELSE excluded.base_url END",
	             "tttti", name, api, backend, url, db_now()) < 0 ||
	    ctl_commit(ctl) != CTL_OK)
		goto out;
	printf("%s provider %s\n", existed ? "updated" : "created", name);
	status = CTL_OK;
out:
	if (status != CTL_OK)
		ctl_rollback(ctl);
	return status;
}

static int ctl_provider_list(struct ctl *ctl, const struct ctl_args *a)
{
	static const struct ctl_col cols[] = {
		{ "ID", "id", COL_INT },
		{ "NAME", "name", COL_TEXT },
		{ "API", "api", COL_TEXT },
		{ "BACKEND", "backend", COL_TEXT },
		{ "URL", "base_url", COL_TEXT },
		{ "CREATED", "created_at", COL_TIME },
	};

#define PROVIDER_LIST_SQL(C)                                                            \
	"SELECT id, name, api, backend, base_url, created_at FROM providers ORDER BY name" C
	return ctl_print_table(ctl, CTL_SQL(PROVIDER_LIST_SQL), NULL, cols,
	                       (int)(sizeof(cols) / sizeof(cols[0])), ctl_list_printer(a));
#undef PROVIDER_LIST_SQL
}

/* ---- maintenance commands: backup, prune ---- */

/* fsyncs path (a file, or a directory so that a rename in it is durable). 0 or -1. */
static int ctl_fsync_path(const char *path, int flags)
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
static int ctl_open_readonly(const char *path, struct db **out)
{
	char err[1024];

	if (db_open(path, DB_READONLY, out, err, sizeof(err)) < 0)
		return ctl_error("%s", err);
	return CTL_OK;
}

/* ---- gateway secret ---- */

/* Prints the gateway secret the agent expects, for HAProxy's environment: the agent's
 * own TALLY_GATEWAY_SECRET if set here too, else the one derived from the key-hashing
 * secret (created if missing, as the agent would). */
static int ctl_gateway_secret(struct ctl *ctl, const struct ctl_args *a)
{
	unsigned char secret[KEYHASH_SECRET_LEN];
	struct gwsecret gw;
	char err[256];
	int rc = gwsecret_from_env(&gw, err, sizeof(err));

	(void)a;
	if (rc < 0)
		return ctl_error("%s: %s", GWSECRET_ENV, err);
	if (rc == 0) {
		if (ctl_secret_load(ctl, secret) != CTL_OK)
			return CTL_FAIL;
		gwsecret_derive(secret, &gw);
		OPENSSL_cleanse(secret, sizeof(secret));
	}
	printf("%s\n", gw.text);
	return CTL_OK;
}

/* Checks the copy at path: PRAGMA integrity_check must say "ok". Reports its schema
 * version and requests rows. */
static int ctl_backup_verify(const char *path, int64_t *version, int64_t *rows)
{
	struct db *db = NULL;
	struct db_stmt *st = NULL;
	const char *res;
	int status = CTL_FAIL;

	if (ctl_open_readonly(path, &db) != CTL_OK)
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
static int ctl_backup(struct ctl *ctl, const struct ctl_args *a)
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
	if (ctl_open_readonly(ctl->db_path, &src) != CTL_OK)
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
	if (ctl_backup_verify(tmp, &version, &rows) != CTL_OK)
		goto out;
	if (ctl_fsync_path(tmp, O_RDONLY) < 0) {
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
	if (ctl_fsync_path(dir, O_RDONLY | O_DIRECTORY) < 0) {
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
static void ctl_sleep_ms(int64_t ms)
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
 * received = written + dropped keeps counting every transaction ever accounted. */
static int ctl_prune(struct ctl *ctl, const struct ctl_args *a)
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

	status = ctl_parse_int(ctl->cmd, OPT_OLDER_THAN_DAYS, a->val[OPT_OLDER_THAN_DAYS], 1,
	                       CTL_PRUNE_DAYS_MAX, "", &days);
	if (status == CTL_OK && a->val[OPT_BATCH])
		status = ctl_parse_int(ctl->cmd, OPT_BATCH, a->val[OPT_BATCH], 1, CTL_PRUNE_BATCH_MAX,
		                       "", &batch);
	if (status == CTL_OK && a->val[OPT_PAUSE_MS])
		status = ctl_parse_int(ctl->cmd, OPT_PAUSE_MS, a->val[OPT_PAUSE_MS], 0,
		                       CTL_PRUNE_PAUSE_MAX, "", &pause);
	if (status != CTL_OK)
		return status;
	status = CTL_FAIL;
	/* requests.started_at is unix milliseconds. */
	cutoff = (db_now() * 1000) - days * CTL_MS_PER_DAY;
	t = (time_t)(cutoff / 1000);
	if (!gmtime_r(&t, &tm) || strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(when, sizeof(when), "%lld ms", (long long)cutoff);
	/* DB_READWRITE, not ctl_db_open's DB_CREATE: a mistyped --db must not become a new,
	 * empty database that "prunes" nothing. */
	if (db_open(ctl->db_path, DB_READWRITE, &ctl->db, err, sizeof(err)) < 0) {
		ctl_error("%s", err);
		goto out;
	}
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
		ctl_sleep_ms(pause);
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

/* ---- command table, help and argument parsing ---- */

#define LIST_HELP(what)                                                                 \
	"Lists " what " as an aligned table, or with --json as a JSON array of objects.\n" \
	"Times are UTC (text) or unix seconds (JSON).\n"                                   \
	"\n"                                                                                \
	"  --json  print JSON\n"

#define KEY_LIMIT_SYNOPSIS                                                              \
	"[--rpm N] [--tpm N] [--max-concurrent N] [--budget-usd X] "                    \
	"[--budget-period day|month|total]"

#define KEY_LIMIT_HELP                                                                  \
	"  --rpm N                requests per minute, 1-1000000000000, or none\n"          \
	"  --tpm N                tokens per minute, 1-1000000000000, or none\n"            \
	"  --max-concurrent N     requests in flight, 1-1000000000000, or none\n"           \
	"  --budget-usd X         spend per period in dollars (> 0), at most 6 decimals\n"        \
	"                         (12.5, 0.000001), up to 1000000000, or none\n"            \
	"  --budget-period P      day, month (the default) or total (ever)\n"               \
	"\n"

#define KEY_POLICY_SYNOPSIS                                                             \
	"[--service-tiers T1,T2,...] [--server-tools P] [--audio P] [--cache-writes P]"

#define KEY_POLICY_HELP                                                                 \
	"  --service-tiers T1,T2  tiers requests may ask for (names from a-z 0-9 _ -),\n"   \
	"                         e.g. default or default,priority; '' or inherit: the\n"  \
	"                         agent's default\n"                                        \
	"  --server-tools P       tools the provider runs (web search): priced (while\n"   \
	"                         the model prices them), allow, deny, or inherit\n"       \
	"  --audio P              audio in or out: priced, allow, deny, or inherit\n"       \
	"  --cache-writes P       prompt cache writes (cache_control): priced (refused\n"  \
	"                         when the model's card has no cache-write price),\n"     \
	"                         allow, deny, or inherit (the agent's --cache-writes)\n"  \
	"\n"

#define CARD_PRICE_SYNOPSIS                                                             \
	"[--input-micros N] [--cached-micros N] [--cache-write-micros N] "                \
	"[--cache-write-1h-micros N] [--output-micros N] [--reasoning-micros N] "         \
	"[--audio-input-micros N] [--audio-output-micros N] [--web-search-micros-per-call N]"

#define CARD_PRICE_HELP                                                                 \
	"\n"                                                                              \
	"Prices, integer micro-dollars per million tokens (1000000 = $1 per Mtok), from\n" \
	"0 to 1000000000000:\n"                                                           \
	"  --input-micros N           prompt tokens\n"                                    \
	"  --cached-micros N          prompt tokens read from the provider's cache\n"     \
	"  --cache-write-micros N     prompt tokens written to the cache (5 minutes)\n"   \
	"  --cache-write-1h-micros N  written to the cache for an hour (unset: at\n"      \
	"                             --cache-write-micros)\n"                            \
	"  --output-micros N          completion tokens\n"                                \
	"  --reasoning-micros N       reasoning tokens (unset: at --output-micros)\n"     \
	"  --audio-input-micros N     audio prompt tokens\n"                              \
	"  --audio-output-micros N    audio completion tokens\n"                          \
	"  --web-search-micros-per-call N  micro-dollars per web search\n"

static const struct ctl_command ctl_commands[] = {
	{ "key", "create", "key create NAME|--name NAME [--models M1,M2,...] [--default-model MODEL] "
	  KEY_LIMIT_SYNOPSIS " " KEY_POLICY_SYNOPSIS,
	  "Creates an API key and prints it alone on stdout. The key is shown this once:\n"
	  "only its HMAC-SHA256 hash (keyed with the secret file, created if missing) and\n"
	  "its first 12 characters (the prefix, for identification) are stored.\n"
	  "\n"
	  "  NAME, --name NAME      unique, 1-64 characters from A-Z a-z 0-9 . _ -;\n"
	  "                         give it one way, not both\n"
	  "  --models M1,M2,...     allow only these models (each must exist);\n"
	  "                         without it the key may use every model\n"
	  "  --default-model MODEL  model for requests that name none; must exist and,\n"
	  "                         with --models, be one of them\n"
	  KEY_LIMIT_HELP
	  KEY_POLICY_HELP
	  "A limit or policy not given is unset: no limit, the agent's default policy.\n",
	  "NAME", OPT(OPT_NAME) | OPT(OPT_MODELS) | OPT(OPT_DEFAULT_MODEL) | KEY_LIMIT_OPTS |
	  KEY_POLICY_OPTS, 0, OPT(OPT_NAME), ctl_key_create },
	{ "key", "set", "key set NAME [--models M1,M2,...] [--default-model MODEL] " KEY_LIMIT_SYNOPSIS
	  " " KEY_POLICY_SYNOPSIS,
	  "Changes the key named NAME; options not given keep their value. At least one\n"
	  "option is required. The running agent applies the change at its next reload.\n"
	  "\n"
	  "  --models M1,M2,...     replace the allow-list (each model must exist)\n"
	  "  --default-model MODEL  model for requests that name none; must exist and be\n"
	  "                         in the key's allow-list, if it has one\n"
	  KEY_LIMIT_HELP
	  KEY_POLICY_HELP
	  "'none' clears a limit, e.g. '--rpm none'; 'inherit' a policy, e.g. '--audio\n"
	  "inherit'. Setting an unknown key fails.\n",
	  "NAME", OPT(OPT_MODELS) | OPT(OPT_DEFAULT_MODEL) | KEY_LIMIT_OPTS | KEY_POLICY_OPTS, 0, 0,
	  ctl_key_set },
	{ "key", "list", "key list [--json]",
	  LIST_HELP("API keys (never their hashes)")
	  "\n"
	  "MODELS is the allow-list, \"*\" (JSON: null) when the key may use every model.\n"
	  "An unset limit or policy shows as \"-\" (JSON: null); JSON has service_tiers as\n"
	  "an array. BUDGET_USD is in dollars; JSON has budget_micros, integer micro-dollars.\n",
	  NULL, OPT(OPT_JSON), 0, 0, ctl_key_list },
	{ "key", "revoke", "key revoke NAME",
	  "Revokes the key named NAME: the agent refuses it from its next reload on.\n"
	  "Revoking an unknown or already revoked key fails.\n",
	  "NAME", 0, 0, 0, ctl_key_revoke },
	{ "model", "set",
	  "model set NAME --provider PROVIDER [--input-micros N] [--output-micros N] "
	  "[--cached-micros N] [--cache-write-micros N] [--max-output N]",
	  "Creates the model NAME (as clients spell it in requests) or updates it. The\n"
	  "prices go to its default rate card for every prompt size (tier default, above\n"
	  "0 tokens); 'tallyctl prices' manages every card and price. Prices are integer\n"
	  "micro-dollars per million tokens (1000000 = $1 per Mtok), from 0 to\n"
	  "1000000000000. A price not given is unknown (unset) on a new card and unchanged\n"
	  "on an existing one; a model given no price has no card. Usage of a model\n"
	  "without the prices it needs is recorded unpriced, never at a guessed price.\n"
	  "\n"
	  "  --provider PROVIDER      provider serving the model (must exist)\n"
	  "  --input-micros N         price of prompt tokens\n"
	  "  --output-micros N        price of completion tokens\n"
	  "  --cached-micros N        price of prompt tokens read from the provider's cache\n"
	  "  --cache-write-micros N   price of prompt tokens written to the provider's cache\n"
	  "                           (5-minute lifetime)\n"
	  "  --max-output N           the most output tokens it gives one answer: what a\n"
	  "                           request naming no bound is estimated at (unchanged\n"
	  "                           when not given; none: the agent's --default-max-tokens)\n",
	  "NAME", OPT(OPT_PROVIDER) | MODEL_PRICE_OPTS | OPT(OPT_MAX_OUTPUT), OPT(OPT_PROVIDER), 0,
	  ctl_model_set },
	{ "model", "list", "model list [--json]",
	  LIST_HELP("models with their provider and prices")
	  "\n"
	  "The prices are those of the default card for every prompt size, as model set\n"
	  "writes them; an unset price shows as \"-\" (JSON: null). CARDS (JSON:\n"
	  "price_cards) counts the model's rate cards: 'tallyctl prices list' shows them.\n",
	  NULL, OPT(OPT_JSON), 0, 0, ctl_model_list },
	{ "prices", "set", "prices set MODEL [--tier TIER] [--above TOKENS] " CARD_PRICE_SYNOPSIS,
	  "Creates or updates a rate card of MODEL: the prices of requests served at TIER\n"
	  "whose prompt is above TOKENS tokens (the card with the largest such TOKENS\n"
	  "applies). Prices not given stay unknown on a new card, unchanged on an existing\n"
	  "one. At least one price is required.\n"
	  "\n"
	  "  --tier TIER     service tier the provider reports, 1-23 characters from\n"
	  "                  a-z 0-9 _ - (default: default, also when none is reported)\n"
	  "  --above TOKENS  prompt size the card starts above, 0-1000000000000 (default 0)\n"
	  CARD_PRICE_HELP,
	  "MODEL", OPT(OPT_TIER) | OPT(OPT_ABOVE) | CARD_PRICE_OPTS, 0, 0, ctl_prices_set },
	{ "prices", "list", "prices list [MODEL] [--json]",
	  "Lists the rate cards of every model, or of MODEL, one per line; an unknown\n"
	  "price shows as \"-\". Prices are micro-dollars per million tokens, WEB_SEARCH\n"
	  "per call. With --json, prints the tally import format (docs/tallyctl.md),\n"
	  "{\"models\": {\"NAME\": [card, ...]}}, which 'prices import' reads back.\n"
	  "\n"
	  "  --json  print JSON\n",
	  "[MODEL]", OPT(OPT_JSON), 0, 0, ctl_prices_list },
	{ "prices", "delete", "prices delete MODEL --tier TIER --above TOKENS",
	  "Deletes the rate card (TIER, TOKENS) of MODEL: requests it priced are then\n"
	  "priced by the card below it, or stored unpriced. Deleting a card that does not\n"
	  "exist fails.\n",
	  "MODEL", OPT(OPT_TIER) | OPT(OPT_ABOVE), OPT(OPT_TIER) | OPT(OPT_ABOVE), 0,
	  ctl_prices_delete },
	{ "prices", "import",
	  "prices import FILE [--format tally|litellm] [--dry-run] [--verbose] [--json]",
	  "Writes the rate cards FILE holds for the models configured here, in one\n"
	  "transaction: all of them or, on any error, none. Each card in FILE replaces\n"
	  "the card of the same tier and prompt size whole; other cards are kept. Models\n"
	  "in FILE not configured here are counted, never created. Prints a report: models\n"
	  "priced, cards written, names matched after a provider prefix, and every price\n"
	  "field it could not map with the number of models carrying it.\n"
	  "\n"
	  "  --format tally    FILE as 'prices list --json' prints it (the default)\n"
	  "  --format litellm  LiteLLM's model_prices_and_context_window.json, dollars per\n"
	  "                    token converted exactly (docs/tallyctl.md has the mapping)\n"
	  "  --dry-run         report, write nothing\n"
	  "  --verbose         also list the models not configured, or not in FILE\n"
	  "  --json            print the report as JSON, every list in full\n",
	  "FILE", OPT(OPT_FORMAT) | OPT(OPT_DRY_RUN) | OPT(OPT_VERBOSE) | OPT(OPT_JSON), 0, 0,
	  ctl_prices_import },
	{ "provider", "set", "provider set NAME --api openai|anthropic --backend BACKEND [--url URL]",
	  "Creates the provider NAME or updates it. Credentials are not stored: HAProxy\n"
	  "adds them from its environment.\n"
	  "\n"
	  "  --api openai|anthropic  wire protocol the provider speaks\n"
	  "  --backend BACKEND       HAProxy backend that serves it\n"
	  "  --url URL               base URL, informational; '' clears it; kept if absent\n",
	  "NAME", OPT(OPT_API) | OPT(OPT_BACKEND) | OPT(OPT_URL), OPT(OPT_API) | OPT(OPT_BACKEND), 0,
	  ctl_provider_set },
	{ "provider", "list", "provider list [--json]",
	  LIST_HELP("providers"),
	  NULL, OPT(OPT_JSON), 0, 0, ctl_provider_list },
	{ "gateway-secret", NULL, "gateway-secret",
	  "Prints the gateway secret the agent expects HAProxy to send (TALLY_GATEWAY_SECRET\n"
	  "in HAProxy's environment): with every decision request and every record, by\n"
	  "which the agent refuses what any other process sends its ports. Unless\n"
	  "TALLY_GATEWAY_SECRET is set for the agent (then printed as is), it is derived\n"
	  "from the key-hashing secret, which is created if missing.\n",
	  NULL, 0, 0, 0, ctl_gateway_secret },
	{ "backup", NULL, "backup DEST",
	  "Copies the database to DEST, consistently, while the agent keeps writing (one\n"
	  "read snapshot: VACUUM INTO). DEST must not exist; it appears only once complete,\n"
	  "synced and passing PRAGMA integrity_check. The copy is compact and has no -wal\n"
	  "file. The key-hashing secret file is not copied: back it up separately, once.\n"
	  "Never creates or migrates the database. SQLite only: back a PostgreSQL store up\n"
	  "with pg_dump.\n",
	  "DEST", 0, 0, 0, ctl_backup },
	{ "prune", NULL, "prune --older-than-days N [--batch ROWS] [--pause-ms MS] [--dry-run]",
	  "Deletes raw usage rows (the requests table) that started more than N days ago,\n"
	  "in batches of ROWS, each its own short write transaction, pausing MS between\n"
	  "batches, so the running agent's writer is never held up for long. Rollups\n"
	  "(usage_*, model_*) and the accounting counters are kept. Safe to\n"
	  "interrupt and run again. The file does not shrink: freed pages are reused.\n"
	  "\n"
	  "  --older-than-days N  1-36500\n"
	  "  --batch ROWS         rows per transaction, 1-100000 (default 1000)\n"
	  "  --pause-ms MS        pause between batches, 0-60000 (default 50)\n"
	  "  --dry-run            only count the rows that would go\n",
	  NULL, OPT(OPT_OLDER_THAN_DAYS) | OPT(OPT_BATCH) | OPT(OPT_PAUSE_MS) | OPT(OPT_DRY_RUN),
	  OPT(OPT_OLDER_THAN_DAYS), 0, ctl_prune },
};

#define CTL_NCOMMANDS (sizeof(ctl_commands) / sizeof(ctl_commands[0]))

/* Synopses of every command of group, or of all commands when group is NULL. */
static void ctl_print_synopses(const char *group)
{
	size_t i;

	for (i = 0; i < CTL_NCOMMANDS; i++) {
		if (!group || strcmp(group, ctl_commands[i].group) == 0)
			printf("  tallyctl [OPTIONS] %s\n", ctl_commands[i].synopsis);
	}
}

static void ctl_help_main(void)
{
	printf("usage: tallyctl [OPTIONS] COMMAND [ARGS]\n"
	       "\n"
	       "Manages the API keys, models, prices and providers of the tally gateway, and\n"
	       "backs up and prunes its database. The first key, model, prices or provider\n"
	       "command creates the database; the running agent picks every change up.\n"
	       "\n"
	       "Options:\n"
	       "  --db STORE     database: a SQLite file path or a postgresql:// URL\n"
	       "                 (default: $TALLY_DB, else %s)\n"
	       "  --secret PATH  key-hashing secret (default: $TALLY_SECRET_FILE, else the\n"
	       "                 database path + \".secret\"; required with a URL)\n"
	       "  -h, --help     this help\n"
	       "\n"
	       "Commands:\n", CTL_DEFAULT_DB);
	ctl_print_synopses(NULL);
	printf("\n"
	       "'tallyctl COMMAND --help' (e.g. 'tallyctl key create --help') explains one.\n"
	       "Exit status: 0 success, 1 failure (database, unknown name), 2 usage error.\n");
}

static void ctl_help_command(const struct ctl_command *cmd)
{
	printf("usage: tallyctl [OPTIONS] %s\n\n%s", cmd->synopsis, cmd->help);
}

static int ctl_opt_find(const char *name, size_t len)
{
	int id;

	for (id = 0; id < OPT_COUNT; id++) {
		if (strlen(ctl_opts[id].name) == len && strncmp(ctl_opts[id].name, name, len) == 0)
			return id;
	}
	return -1;
}

/* Parses the arguments after "GROUP VERB". Returns CTL_OK, CTL_HELP (help printed) or
 * CTL_USAGE (message printed). */
static int ctl_parse_args(const struct ctl_command *cmd, int argc, char **argv, struct ctl_args *a)
{
	int i, id, operands_only = 0;

	for (i = 0; i < argc; i++) {
		const char *arg = argv[i], *name, *eq;
		size_t len;

		if (operands_only || arg[0] != '-' || arg[1] == '\0') {
			if (!cmd->operand || a->operand)
				return ctl_usage(cmd, "unexpected argument '%s'", arg);
			a->operand = arg;
			continue;
		}
		if (strcmp(arg, "--") == 0) {
			operands_only = 1;
			continue;
		}
		if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
			ctl_help_command(cmd);
			return CTL_HELP;
		}
		name = arg + 2;
		eq = strchr(name, '=');
		len = eq ? (size_t)(eq - name) : strlen(name);
		id = arg[1] == '-' ? ctl_opt_find(name, len) : -1;
		if (id < 0 || !(cmd->allowed & OPT(id)))
			return ctl_usage(cmd, "unknown option '%.*s'", (int)(name - arg + (long)len), arg);
		if (a->val[id])
			return ctl_usage(cmd, "option --%s given twice", ctl_opts[id].name);
		if (!ctl_opts[id].metavar) {
			if (eq)
				return ctl_usage(cmd, "option --%s takes no value", ctl_opts[id].name);
			a->val[id] = arg;
		} else if (eq) {
			a->val[id] = eq + 1;
		} else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
			a->val[id] = argv[++i];
		} else {
			return ctl_usage(cmd, "option --%s needs a value (%s)", ctl_opts[id].name,
			                 ctl_opts[id].metavar);
		}
	}
	/* An option standing in for the operand (key create --name): one of the two. */
	for (id = 0; id < OPT_COUNT; id++) {
		if (!(cmd->operand_alt & OPT(id)) || !a->val[id])
			continue;
		if (a->operand)
			return ctl_usage(cmd, "give %s either as an argument or with --%s, not both",
			                 cmd->operand, ctl_opts[id].name);
		a->operand = a->val[id];
	}
	if (cmd->operand && !a->operand && cmd->operand[0] != '[')
		return ctl_usage(cmd, "missing %s", cmd->operand);
	for (id = 0; id < OPT_COUNT; id++) {
		if ((cmd->required & OPT(id)) && !a->val[id])
			return ctl_usage(cmd, "missing required option --%s %s", ctl_opts[id].name,
			                 ctl_opts[id].metavar);
	}
	return CTL_OK;
}

/* Matches argv[*i] against the global option "--name VALUE" or "--name=VALUE".
 * Returns 1 (consumed, *i advanced past a separate value), 0 (not this option) or
 * CTL_USAGE. */
static int ctl_global_opt(const char *name, int argc, char **argv, int *i, const char **out)
{
	const char *arg = argv[*i];
	size_t len = strlen(name);

	if (strncmp(arg, "--", 2) != 0 || strncmp(arg + 2, name, len) != 0 ||
	    (arg[2 + len] != '\0' && arg[2 + len] != '='))
		return 0;
	if (arg[2 + len] == '=')
		*out = arg + 3 + len;
	else if (*i + 1 < argc)
		*out = argv[++*i];
	else
		return ctl_usage(NULL, "option --%s needs a value (PATH)", name);
	if (**out == '\0')
		return ctl_usage(NULL, "option --%s needs a non-empty value", name);
	return 1;
}

static const struct ctl_command *ctl_command_find(const char *group, const char *verb)
{
	size_t i;

	for (i = 0; i < CTL_NCOMMANDS; i++) {
		if (strcmp(ctl_commands[i].group, group) == 0 &&
		    (!verb || (ctl_commands[i].verb && strcmp(ctl_commands[i].verb, verb) == 0)))
			return &ctl_commands[i];
	}
	return NULL;
}

/* Parses global options and the command words, then runs the command. */
static int ctl_main(struct ctl *ctl, int argc, char **argv)
{
	struct ctl_args args = { 0 };
	const char *group, *verb;
	int i, rc;

	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			ctl_help_main();
			return CTL_HELP;
		}
		rc = ctl_global_opt("db", argc, argv, &i, &ctl->db_path);
		if (rc == 0)
			rc = ctl_global_opt("secret", argc, argv, &i, &ctl->secret_path);
		if (rc == 0)
			return ctl_usage(NULL, "unknown option '%s'", argv[i]);
		if (rc != 1)
			return rc;
	}
	if (i == argc)
		return ctl_usage(NULL, "missing command");
	group = argv[i++];
	ctl->cmd = ctl_command_find(group, NULL);
	if (!ctl->cmd)
		return ctl_usage(NULL, "unknown command '%s'", group);
	if (!ctl->cmd->verb) {   /* one-word command: the rest are its arguments */
		rc = ctl_parse_args(ctl->cmd, argc - i, argv + i, &args);
		return rc == CTL_OK ? ctl->cmd->run(ctl, &args) : rc;
	}
	verb = i < argc ? argv[i++] : NULL;
	if (verb && (strcmp(verb, "-h") == 0 || strcmp(verb, "--help") == 0)) {
		printf("usage:\n");
		ctl_print_synopses(group);
		printf("\n'tallyctl %s SUBCOMMAND --help' explains one.\n", group);
		return CTL_HELP;
	}
	if (!verb)
		return ctl_usage(NULL, "missing subcommand after '%s'", group);
	ctl->cmd = ctl_command_find(group, verb);
	if (!ctl->cmd)
		return ctl_usage(NULL, "unknown command '%s %s'", group, verb);
	rc = ctl_parse_args(ctl->cmd, argc - i, argv + i, &args);
	return rc == CTL_OK ? ctl->cmd->run(ctl, &args) : rc;
}

int main(int argc, char **argv)
{
	struct ctl ctl = { 0 };
	const char *env;
	int status;

	env = getenv("TALLY_DB");
	ctl.db_path = env && *env ? env : CTL_DEFAULT_DB;
	env = getenv("TALLY_SECRET_FILE");
	ctl.secret_path = env && *env ? env : NULL;

	status = ctl_main(&ctl, argc, argv);
	if (status == CTL_HELP)
		status = CTL_OK;
	db_close(ctl.db);
	if (fflush(stdout) != 0 && status == CTL_OK)
		status = ctl_error("cannot write to stdout");
	return status;
}
