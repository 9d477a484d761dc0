/* tally-gen: fills a tally database with usage rows through the agent's own accounting
 * path: rows are pushed into a queue (queue.c) and stored by the real writer thread
 * (writer.c), with received counted (counters.h) before each push as the intake does, so the
 * requests table, the hourly and daily rollups and the accounting row are exactly what
 * the agent would keep. The main thread builds or reads the rows and pushes them (it
 * waits when the queue is full: nothing is dropped); the writer thread stores them.
 *
 * Modes:
 *   --rows N        realistic rows spread over [end - days, end), in time order
 *   --duration S    live rows stamped with the current time for S seconds, as fast as
 *                   the writer takes them or at --rate rows/s (benchmarks)
 *   --ndjson FILE   the given rows, one JSON object a line (ndjson_row.h); every line
 *                   is checked before anything is written
 * The store is a SQLite path or a postgresql:// URL (common/db.h); on either, rows go
 * through the writer, which uses the store's fast path for bulk rows.
 * Random rows depend only on the seed, --keys, --days and --end (not in live mode);
 * --teams adds only their team_id (a key's team is fixed by its rank, not drawn), and
 * --end-users only their end_user and --tags only their tags (each drawn from a stream
 * of its own).
 * Those whose usage went unreported (client aborts, cuts, lost records, answers that
 * outgrew the buffer) carry the agent's estimate of it, as the intake would charge it. */
#include <errno.h>
#include <stddef.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "acct.h"
#include "counters.h"
#include "db.h"
#include "decision.h"
#include "keyhash.h"
#include "keytable.h"
#include "ndjson_row.h"
#include "queue.h"
#include "stats.h"
#include "tags.h"
#include "writer.h"

#define GEN_QUEUE_ROWS   65536
#define GEN_WAIT_NS      100000     /* producer's pause when the queue is full */
#define GEN_MINUTE_MS    60000
#define GEN_DAY_S        86400
#define GEN_MAX_DAYS     3660
#define GEN_MAX_KEYS     100000
#define GEN_ZIPF_S       1.1
#define GEN_STREAM_SHARE 0.35
#define GEN_ERROR_SHARE  0.02
#define GEN_OVERFLOW_SHARE 0.005    /* unary answers whose usage outgrew HAProxy's buffer */
#define GEN_HEADER_BYTES 250        /* request bytes that are not the body */
#define GEN_KEY_MODELS   3          /* a key uses a few models: 75%, 20%, 5% of its calls */
#define GEN_MAX_TEAMS    1000
#define GEN_TEAMLESS     8          /* every 8th key (rank 7, 15, ...) is in no team */
#define GEN_MAX_END_USERS 1000000   /* per key */
#define GEN_END_USER_SEED 0x656e642d75736572ull   /* "end-user": their own stream */
#define GEN_MAX_TAGS     100000     /* distinct tags */
#define GEN_TAG_SEED     0x7461677300000000ull   /* "tags": their own stream */

static const char gen_usage_text[] =
	"usage: tally-gen --db STORE --rows N [--seed S] [--days D] [--end UNIX_SECONDS] [--keys K]\n"
	"                 [--teams T] [--end-users U] [--tags N] [--secret PATH] [--node NAME]\n"
	"       tally-gen --db STORE --duration SECONDS [--rate ROWS_PER_S] [--rows N] [--seed S]\n"
	"                 [--keys K] [--teams T] [--end-users U] [--tags N] [--secret PATH]\n"
	"                 [--node NAME]\n"
	"       tally-gen --db STORE --ndjson FILE|- [--node NAME]\n"
	"\n"
	"Stores usage rows in the tally store STORE, a SQLite path or a postgresql:// URL\n"
	"(created or migrated first), through the agent's queue and writer, so rollups and the\n"
	"accounting row are what the agent keeps.\n"
	"  --rows N         N realistic rows with started_at in [end - D days, end), in time\n"
	"                   order, busier by day; same seed, D, end and K: same rows\n"
	"  --seed S         random seed (default 1)\n"
	"  --days D         span in days, 1..3660 (default 30)\n"
	"  --end T          end of the span, unix seconds (default now)\n"
	"  --keys K         keys team-<word>-<n>, 1..100000 (default 200), created if absent with\n"
	"                   12 models of providers openai, anthropic and vllm\n"
	"  --teams T        teams <word>-<n>, 0..1000 (default 0), created if absent; a key\n"
	"                   created goes to team (rank mod T) but every 8th is in none; rows\n"
	"                   carry their key's team as the key row holds it\n"
	"  --end-users U    every row names an end user, one of U per key, user-1..user-U,\n"
	"                   0..1000000 (default 0: none); a few are busy, most are not\n"
	"  --tags N         every row carries 0 to 3 tags, of N distinct ones over the names\n"
	"                   env, feature, region and tenant (env=v1, feature=v1, ..., one per\n"
	"                   name), 0..100000 (default 0: none); a few are common, most rare\n"
	"  --secret PATH    key-hashing secret file for the keys created, made if missing\n"
	"                   (default: the SQLite path + .secret; required with a URL)\n"
	"  --node NAME      the accounting row the counters go to, as the agent's --node\n"
	"                   (default " WRITER_NODE_DEFAULT ")\n"
	"  --duration S     live rows stamped with the current time, for S seconds (at most\n"
	"                   --rows if given), as fast as the writer stores them or\n"
	"  --rate R         at R rows/s\n"
	"  --ndjson FILE    rows from FILE (- for stdin), one JSON object per line with keys\n"
	"                   named like the requests columns; request_id, outcome and started_at\n"
	"                   (unix ms) are required, a missing or null value is not known.\n"
	"                   Every line is checked first: a bad one exits 2, nothing written\n"
	"Prints rows written, elapsed time and rows/s. Exit 0; 1 on failure or a dropped row;\n"
	"2 on bad usage or input.\n";

struct gen_opts {
	const char *db, *ndjson, *secret, *node;
	long long rows, seed, days, end_s, keys, teams, end_users, tags;  /* rows, end_s -1: not given */
	double duration_s, rate;                   /* 0: not given */
};

/* ---- random numbers: xoshiro256**, seeded through splitmix64 ---- */

struct gen_rng {
	uint64_t s[4];
};

static uint64_t gen_mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static void gen_rng_seed(struct gen_rng *r, uint64_t seed)
{
	int i;

	for (i = 0; i < 4; i++)
		r->s[i] = seed = gen_mix(seed);
}

static uint64_t gen_rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t gen_rng_next(struct gen_rng *r)
{
	uint64_t *s = r->s, out = gen_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = gen_rotl(s[3], 45);
	return out;
}

/* Uniform in [0, 1). */
static double gen_rng_unit(struct gen_rng *r)
{
	return (double)(gen_rng_next(r) >> 11) * 0x1.0p-53;
}

static double gen_rng_between(struct gen_rng *r, double lo, double hi)
{
	return lo + (hi - lo) * gen_rng_unit(r);
}

/* Log-normal with the given median; sigma is that of the underlying normal. */
static double gen_rng_lognormal(struct gen_rng *r, double median, double sigma)
{
	double u = 1.0 - gen_rng_unit(r), v = gen_rng_unit(r);

	return median * exp(sigma * sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v));
}

static int64_t gen_clamp(double v, int64_t lo, int64_t hi)
{
	return v < (double)lo ? lo : v > (double)hi ? hi : (int64_t)v;
}

/* ---- Zipf popularity ---- */

/* Cumulative weights 1/k^s of ranks 1..n in cdf[0..n). */
static void gen_zipf_init(double *cdf, size_t n)
{
	double sum = 0;
	size_t i;

	for (i = 0; i < n; i++)
		cdf[i] = sum += pow((double)(i + 1), -GEN_ZIPF_S);
}

/* A rank in [0, n), rank 0 the most popular. */
static size_t gen_zipf_pick(const double *cdf, size_t n, struct gen_rng *r)
{
	double u = gen_rng_unit(r) * cdf[n - 1];
	size_t lo = 0, hi = n - 1;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (cdf[mid] <= u)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* ---- the catalogue: providers, models, keys ---- */

struct gen_provider {
	const char *name, *api, *backend, *base_url;
};

static const struct gen_provider gen_providers[] = {
	{ "openai", "openai", "be_openai", "https://api.openai.com" },
	{ "anthropic", "anthropic", "be_anthropic", "https://api.anthropic.com" },
	{ "vllm", "openai", "be_vllm", "http://vllm.internal:8000" },
};

#define GEN_U (-1)    /* a price the card does not have: NULL */

/* One rate card's prices (model_prices), micro-dollars per Mtok, web searches per call;
 * reasoning is left NULL: at the output price. */
struct gen_prices {
	int64_t input, cached, cache_write, cache_write_1h, output, audio_input, audio_output,
	        web_search;
};

/* Anthropic's web search: $10 per 1000 calls. */
#define GEN_WEB_SEARCH 10000

/* In popularity order; prices: the model's 'default' card for every prompt size (all
 * unset: no card). */
struct gen_model {
	const char *name, *provider;
	struct gen_prices prices;
	int reasoning;          /* o-series: part of the completion is reasoning */
	double ttfb_ms;         /* median time to the first token */
	double ms_per_token;    /* median decode time per output token */
};

static const struct gen_model gen_models[] = {
	{ "gpt-4o-mini", "openai", { 150000, 75000, GEN_U, GEN_U, 600000, 10000000, 20000000, GEN_U },
	  0, 350, 8 },
	{ "gpt-4o", "openai", { 2500000, 1250000, GEN_U, GEN_U, 10000000, 40000000, 80000000, GEN_U },
	  0, 450, 15 },
	{ "claude-sonnet-4", "anthropic",
	  { 3000000, 300000, 3750000, 6000000, 15000000, GEN_U, GEN_U, GEN_WEB_SEARCH }, 0, 700, 18 },
	{ "gpt-4.1-mini", "openai", { 400000, 100000, GEN_U, GEN_U, 1600000, GEN_U, GEN_U, GEN_U },
	  0, 350, 9 },
	{ "llama-3.1-8b", "vllm", { 50000, GEN_U, GEN_U, GEN_U, 100000, GEN_U, GEN_U, GEN_U },
	  0, 150, 5 },
	{ "claude-3-5-haiku", "anthropic",
	  { 800000, 80000, 1000000, 1600000, 4000000, GEN_U, GEN_U, GEN_WEB_SEARCH }, 0, 450, 10 },
	{ "gpt-4.1", "openai", { 2000000, 500000, GEN_U, GEN_U, 8000000, GEN_U, GEN_U, GEN_U },
	  0, 500, 14 },
	{ "o4-mini", "openai", { 1100000, 275000, GEN_U, GEN_U, 4400000, GEN_U, GEN_U, GEN_U },
	  1, 1500, 10 },
	{ "llama-3.3-70b", "vllm", { 300000, GEN_U, GEN_U, GEN_U, 600000, GEN_U, GEN_U, GEN_U },
	  0, 250, 20 },
	{ "o3", "openai", { 2000000, 500000, GEN_U, GEN_U, 8000000, GEN_U, GEN_U, GEN_U },
	  1, 3000, 18 },
	{ "claude-opus-4", "anthropic",
	  { 15000000, 1500000, 18750000, 30000000, 75000000, GEN_U, GEN_U, GEN_WEB_SEARCH },
	  0, 1200, 35 },
	/* Self-hosted, never priced: its rows are stored unpriced. */
	{ "qwen2.5-72b", "vllm", { GEN_U, GEN_U, GEN_U, GEN_U, GEN_U, GEN_U, GEN_U, GEN_U },
	  0, 300, 22 },
};

/* Cards beside the default ones: OpenAI's priority tier (no audio prices: an audio row
 * is never served at it here) and Sonnet's long-context rate above 200k prompt tokens. */
struct gen_card {
	const char *model, *tier;
	int64_t above_tokens;
	struct gen_prices prices;
};

#define GEN_LONG_PROMPT 200000

static const struct gen_card gen_cards[] = {
	{ "gpt-4o-mini", "priority", 0, { 250000, 125000, GEN_U, GEN_U, 1000000, GEN_U, GEN_U, GEN_U } },
	{ "gpt-4o", "priority", 0, { 4250000, 2125000, GEN_U, GEN_U, 17000000, GEN_U, GEN_U, GEN_U } },
	{ "claude-sonnet-4", "default", GEN_LONG_PROMPT,
	  { 6000000, 600000, 7500000, 12000000, 22500000, GEN_U, GEN_U, GEN_WEB_SEARCH } },
};

#define GEN_NMODELS (sizeof(gen_models) / sizeof(gen_models[0]))

static const char *const gen_words[] = {
	"search", "support", "billing", "growth", "infra", "mobile", "web", "data", "ml",
	"risk", "legal", "sales", "ops", "docs", "eval", "agents", "voice", "ads", "crm",
	"finance", "security", "research", "platform", "payments",
};

#define GEN_NWORDS (sizeof(gen_words) / sizeof(gen_words[0]))

/* Everything the random rows are drawn from; built once. */
struct gen {
	struct gen_rng rng;
	int64_t *key_ids;             /* key rank -> keys.id */
	int64_t *key_teams;           /* key rank -> keys.team_id (ACCT_NONE: none) */
	size_t nteams;
	unsigned char (*key_model)[GEN_KEY_MODELS];  /* key rank -> its models, favourite first */
	size_t nkeys;
	double *key_cdf, model_cdf[GEN_NMODELS];
	size_t nusers;                /* end users per key; 0: rows name none */
	double *user_cdf;             /* their popularity, the same for every key */
	struct gen_rng user_rng;      /* drawn apart, so that the other columns stay alike */
	size_t ntags;                 /* distinct tags; 0: rows carry none */
	double *tag_cdf;              /* their popularity */
	struct gen_rng tag_rng;       /* drawn apart, as the end users are */
	struct keytable *kt;          /* the agent's snapshot, which prices the rows */
	const struct price_sheet *prices[GEN_NMODELS];  /* NULL: unknown to the keytable */
	unsigned pid;                 /* the pid part of request ids */
	uint64_t counter;             /* HAProxy's request counter */
	/* Span mode: cumulative arrival weight at each minute boundary of the span. */
	double *minute_cdf;
	size_t nminutes, minute;
	int64_t start_ms, span_ms;
};

static void gen_key_name(size_t i, char *out, size_t len)
{
	snprintf(out, len, "team-%s-%zu", gen_words[i % GEN_NWORDS], i + 1);
}

/* Team j's name; the team (1 + j, 0: none) of key rank i when it is created. */
static void gen_team_name(size_t j, char *out, size_t len)
{
	snprintf(out, len, "%s-%zu", gen_words[j % GEN_NWORDS], j + 1);
}

static size_t gen_key_team(const struct gen *g, size_t i)
{
	return g->nteams && i % GEN_TEAMLESS != GEN_TEAMLESS - 1 ? i % g->nteams + 1 : 0;
}

static int gen_sql_error(struct db *db, const char *what)
{
	fprintf(stderr, "tally-gen: %s: %s\n", what, db_errmsg(db));
	return -1;
}

/* Runs sql with the given binds (i: int64, t: text or NULL, b: KEYHASH_LEN blob, n:
 * int64 or NULL when negative). Returns the rows it changed, or -1 with a message. */
static int64_t gen_exec(struct db *db, const char *sql, const char *types,
                        const void *const *args)
{
	struct db_stmt *st = NULL;
	int64_t rc = -1;
	int i;

	if (db_prepare(db, sql, &st) < 0)
		return gen_sql_error(db, sql);
	for (i = 0; types[i]; i++) {
		int64_t v = types[i] == 'i' || types[i] == 'n' ? *(const int64_t *)args[i] : 0;
		int brc = types[i] == 't' ? (args[i] ? db_bind_text(st, i + 1, args[i], strlen(args[i]))
		                                     : db_bind_null(st, i + 1))
		        : types[i] == 'b' ? db_bind_blob(st, i + 1, args[i], KEYHASH_LEN)
		        : types[i] == 'n' && v < 0 ? db_bind_null(st, i + 1)
		        : db_bind_int(st, i + 1, v);

		if (brc < 0)
			goto out;
	}
	if (db_step(st) == DB_DONE)
		rc = db_changes(st);
out:
	if (rc < 0)
		gen_sql_error(db, sql);
	db_finalize(st);
	return rc;
}

/* Stores one rate card of a model just created. */
static int gen_card_insert(struct db *db, const char *model, const char *tier, int64_t above,
                           const struct gen_prices *p)
{
	const void *args[] = { model, tier, &above, &p->input, &p->cached, &p->cache_write,
	                       &p->cache_write_1h, &p->output, &p->audio_input,
	                       &p->audio_output, &p->web_search };

	/* PostgreSQL types a parameter of a SELECT list as text: the casts say BIGINT. */
	return gen_exec(db, "INSERT INTO model_prices (model_id, tier, above_tokens,"
	                " input_micros_per_mtok, cached_micros_per_mtok, cache_write_micros_per_mtok,"
	                " cache_write_1h_micros_per_mtok, output_micros_per_mtok,"
	                " audio_input_micros_per_mtok, audio_output_micros_per_mtok,"
	                " web_search_micros_per_call)"
	                " SELECT id, ?2, CAST(?3 AS BIGINT), CAST(?4 AS BIGINT), CAST(?5 AS BIGINT),"
	                " CAST(?6 AS BIGINT), CAST(?7 AS BIGINT), CAST(?8 AS BIGINT),"
	                " CAST(?9 AS BIGINT), CAST(?10 AS BIGINT), CAST(?11 AS BIGINT)"
	                " FROM models WHERE name = ?1", "ttinnnnnnnn", args) < 0 ? -1 : 0;
}

/* Creates the providers and models of the catalogue that do not exist yet, with their
 * cards; existing ones (and their cards) are left as they are. */
static int gen_catalogue_models(struct db *db, int64_t now)
{
	int64_t changed;
	size_t i, j;

	for (i = 0; i < sizeof(gen_providers) / sizeof(gen_providers[0]); i++) {
		const struct gen_provider *p = &gen_providers[i];
		const void *args[] = { p->name, p->api, p->backend, p->base_url, &now };

		if (gen_exec(db, "INSERT INTO providers (name, api, backend, base_url, created_at)"
		             " VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (name) DO NOTHING",
		             "tttti", args) < 0)
			return -1;
	}
	for (i = 0; i < GEN_NMODELS; i++) {
		const struct gen_model *m = &gen_models[i];
		const void *args[] = { m->name, m->provider, &now };

		changed = gen_exec(db, "INSERT INTO models (name, provider_id, created_at,"
		                   " updated_at) SELECT ?1, id, CAST(?3 AS BIGINT), CAST(?3 AS BIGINT)"
		                   " FROM providers WHERE name = ?2 ON CONFLICT (name) DO NOTHING",
		                   "tti", args);
		if (changed < 0)
			return -1;
		if (changed == 0)
			continue;
		if (m->prices.input != GEN_U &&
		    gen_card_insert(db, m->name, "default", 0, &m->prices) < 0)
			return -1;
		for (j = 0; j < sizeof(gen_cards) / sizeof(gen_cards[0]); j++)
			if (strcmp(gen_cards[j].model, m->name) == 0 &&
			    gen_card_insert(db, m->name, gen_cards[j].tier, gen_cards[j].above_tokens,
			                    &gen_cards[j].prices) < 0)
				return -1;
	}
	return 0;
}

/* Whether m has a card for tier: the tiers its rows may report. */
static int gen_has_tier(const struct gen_model *m, const char *tier)
{
	size_t j;

	for (j = 0; j < sizeof(gen_cards) / sizeof(gen_cards[0]); j++)
		if (strcmp(gen_cards[j].model, m->name) == 0 && strcmp(gen_cards[j].tier, tier) == 0)
			return 1;
	return 0;
}

/* The id of the row named name (sql: its look-up in keys or teams) into *id (0: none),
 * and its second column into *second (ACCT_NONE: NULL) when given. 0, or -1 on error. */
static int gen_lookup(struct db *db, const char *sql, const char *name, int64_t *id,
                      int64_t *second)
{
	struct db_stmt *st = NULL;
	enum db_status step;
	int rc = -1;

	if (db_prepare(db, sql, &st) < 0 || db_bind_text(st, 1, name, strlen(name)) < 0)
		goto out;
	step = db_step(st);
	if (step == DB_ROW || step == DB_DONE) {
		*id = step == DB_ROW ? db_col_int(st, 0) : 0;
		if (second)
			*second = step == DB_ROW && db_col_type(st, 1) != DB_NULL ? db_col_int(st, 1)
			                                                          : ACCT_NONE;
		rc = 0;
	}
out:
	if (rc < 0)
		gen_sql_error(db, sql);
	db_finalize(st);
	return rc;
}

/* keys.id and keys.team_id of key rank i, named name. */
static int gen_key_id(struct db *db, struct gen *g, size_t i, const char *name)
{
	return gen_lookup(db, "SELECT id, team_id FROM keys WHERE name = ?1", name, &g->key_ids[i],
	                  &g->key_teams[i]);
}

/* The teams keys go to, created where missing; their ids into team_ids[0..nteams). */
static int gen_teams(struct db *db, const struct gen *g, int64_t created, int64_t *team_ids)
{
	static const char look[] = "SELECT id FROM teams WHERE name = ?1";
	char name[64];
	size_t j;

	for (j = 0; j < g->nteams; j++) {
		const void *args[] = { name, &created };

		gen_team_name(j, name, sizeof(name));
		if (gen_lookup(db, look, name, &team_ids[j], NULL) < 0 ||
		    (!team_ids[j] &&
		     (gen_exec(db, "INSERT INTO teams (name, created_at) VALUES (?1, ?2)", "ti", args) < 0 ||
		      gen_lookup(db, look, name, &team_ids[j], NULL) < 0)))
			return -1;
	}
	return 0;
}

/* Creates key rank i as tallyctl's `key create` does (a random key, only its keyed hash
 * and prefix stored; the clear key is not kept), with limits on some keys so that the
 * dashboard has some to show. */
static int gen_key_create(struct db *db, const struct gen *g, size_t i, const char *name,
                          const unsigned char secret[KEYHASH_SECRET_LEN], int64_t created,
                          const int64_t *team_ids)
{
	char key[KEYHASH_KEY_LEN + 1], prefix[KEYHASH_PREFIX_LEN + 1];
	unsigned char hash[KEYHASH_LEN];
	const char *dflt = i % 4 == 0 ? gen_models[g->key_model[i][0]].name : NULL;
	int64_t rpm = i % 10 == 3 ? 600 : -1, tpm = i % 10 == 3 ? 200000 : -1;
	int64_t conc = i % 15 == 4 ? 20 : -1, budget = i % 7 == 2 ? 500000000 : -1;
	int64_t team = gen_key_team(g, i) ? team_ids[gen_key_team(g, i) - 1] : -1;
	const void *args[] = { name, prefix, hash, dflt, &created, &rpm, &tpm, &conc, &budget,
	                       &team };

	if (keyhash_generate(key, sizeof(key)) < 0 || keyhash_prefix(key, prefix, sizeof(prefix)) < 0) {
		fprintf(stderr, "tally-gen: cannot generate a key\n");
		return -1;
	}
	keyhash_compute(secret, key, KEYHASH_KEY_LEN, hash);
	return gen_exec(db, "INSERT INTO keys (name, prefix, hash, default_model, created_at, rpm,"
	                " tpm, max_concurrent, budget_micros, team_id) VALUES (?1, ?2, ?3, ?4, ?5,"
	                " ?6, ?7, ?8, ?9, ?10)", "ttbtinnnnn", args) < 0 ? -1 : 0;
}

/* The providers, models, teams and keys rows refer to, created where missing, in one
 * transaction; then each key's id and team and each model's prices as the agent loads
 * them (keytable_load), so that costs are the agent's. A key that exists keeps its
 * team: rows carry the team its row names, as the agent's decisions do. */
static int gen_catalogue(struct db *db, struct gen *g, const struct gen_opts *o,
                         int64_t created)
{
	unsigned char secret[KEYHASH_SECRET_LEN];
	char path[4096], name[64], err[512] = "";
	int64_t *team_ids = calloc(g->nteams ? g->nteams : 1, sizeof(*team_ids));
	size_t i;

	/* A URL has no "beside": the secret must be named, as the agent's --secret is. */
	if (!team_ids) {
		fprintf(stderr, "tally-gen: out of memory\n");
		return -1;
	}
	if (!o->secret && db_is_postgres(o->db)) {
		fprintf(stderr, "tally-gen: --secret PATH is required with a postgresql:// store\n");
		goto fail;
	}
	if (keyhash_secret_path(o->secret, o->db, path, sizeof(path)) < 0 ||
	    keyhash_secret_load(path, 1, secret, err, sizeof(err)) < 0) {
		fprintf(stderr, "tally-gen: key secret: %s\n", err);
		goto fail;
	}
	if (db_begin(db) != DB_OK) {
		fprintf(stderr, "tally-gen: %s\n", db_errmsg(db));
		goto fail;
	}
	if (gen_catalogue_models(db, db_now()) < 0 || gen_teams(db, g, created, team_ids) < 0)
		goto out;
	for (i = 0; i < g->nkeys; i++) {
		gen_key_name(i, name, sizeof(name));
		if (gen_key_id(db, g, i, name) < 0 ||
		    (!g->key_ids[i] && (gen_key_create(db, g, i, name, secret, created, team_ids) < 0 ||
		                        gen_key_id(db, g, i, name) < 0)))
			goto out;
	}
	if (db_commit(db) != DB_OK) {
		fprintf(stderr, "tally-gen: %s\n", db_errmsg(db));
		goto out;
	}
	free(team_ids);
	team_ids = NULL;
	if (keytable_load(db, secret, &g->kt, err, sizeof(err)) < 0) {
		fprintf(stderr, "tally-gen: %s\n", err);
		return -1;
	}
	for (i = 0; i < GEN_NMODELS; i++) {
		const struct kt_model *m = keytable_find_model(g->kt, gen_models[i].name,
		                                               strlen(gen_models[i].name));

		g->prices[i] = m ? &m->prices : NULL;
	}
	return 0;
out:
	db_rollback(db);
fail:
	free(team_ids);
	return -1;
}

/* Relative arrival rate at unix time t_ms: a working-day peak around 14:30 UTC over a
 * quiet night, weekends at under half. */
static double gen_arrival_weight(int64_t t_ms)
{
	int64_t s = t_ms / 1000, day = s / GEN_DAY_S;
	double hour = (double)(s % GEN_DAY_S) / 3600.0, x = (hour - 14.5) / 4.0;
	double w = 0.12 + exp(-x * x);
	int weekday = (int)((day + 4) % 7);   /* 1970-01-01 was a Thursday; 0: Sunday */

	return weekday == 0 || weekday == 6 ? w * 0.45 : w;
}

/* The span's arrival curve, one point per minute boundary. */
static int gen_span_init(struct gen *g, int64_t end_s, long long days)
{
	size_t j;

	g->span_ms = (int64_t)days * GEN_DAY_S * 1000;
	g->start_ms = end_s * 1000 - g->span_ms;
	g->nminutes = (size_t)((g->span_ms + GEN_MINUTE_MS - 1) / GEN_MINUTE_MS);
	g->minute_cdf = malloc((g->nminutes + 1) * sizeof(*g->minute_cdf));
	if (!g->minute_cdf)
		return -1;
	g->minute_cdf[0] = 0;
	for (j = 0; j < g->nminutes; j++)
		g->minute_cdf[j + 1] = g->minute_cdf[j] +
			gen_arrival_weight(g->start_ms + (int64_t)j * GEN_MINUTE_MS);
	return 0;
}

/* started_at of row i of n in span mode: stratified draws through the inverse of the
 * arrival curve, so rows come in time order and exactly n of them fill the span. */
static int64_t gen_span_time(struct gen *g, uint64_t i, uint64_t n)
{
	const double *c = g->minute_cdf;
	double target = ((double)i + gen_rng_unit(&g->rng)) / (double)n * c[g->nminutes], frac;
	int64_t t;

	while (g->minute + 1 < g->nminutes && c[g->minute + 1] <= target)
		g->minute++;
	frac = (target - c[g->minute]) / (c[g->minute + 1] - c[g->minute]);
	t = g->start_ms + (int64_t)g->minute * GEN_MINUTE_MS + (int64_t)(frac * GEN_MINUTE_MS);
	return t >= g->start_ms + g->span_ms ? g->start_ms + g->span_ms - 1 : t;
}

static void gen_free(struct gen *g)
{
	keytable_unref(g->kt);
	free(g->key_ids);
	free(g->key_teams);
	free(g->key_model);
	free(g->key_cdf);
	free(g->user_cdf);
	free(g->tag_cdf);
	free(g->minute_cdf);
}

/* Popularity tables and each key's models (distinct, by model popularity), from the
 * seed. 0, or -1 (memory). */
static int gen_init(struct gen *g, uint64_t seed, size_t nkeys, size_t nteams, size_t nusers,
                    size_t ntags, unsigned pid)
{
	size_t i, j, k;

	memset(g, 0, sizeof(*g));
	gen_rng_seed(&g->rng, seed);
	gen_rng_seed(&g->user_rng, seed ^ GEN_END_USER_SEED);
	gen_rng_seed(&g->tag_rng, seed ^ GEN_TAG_SEED);
	g->ntags = ntags;
	g->nkeys = nkeys;
	g->nteams = nteams;
	g->nusers = nusers;
	g->pid = pid;
	g->key_ids = calloc(nkeys, sizeof(*g->key_ids));
	g->key_teams = calloc(nkeys, sizeof(*g->key_teams));
	g->key_model = calloc(nkeys, sizeof(*g->key_model));
	g->key_cdf = calloc(nkeys, sizeof(*g->key_cdf));
	g->user_cdf = calloc(nusers ? nusers : 1, sizeof(*g->user_cdf));
	g->tag_cdf = calloc(ntags ? ntags : 1, sizeof(*g->tag_cdf));
	if (!g->key_ids || !g->key_teams || !g->key_model || !g->key_cdf || !g->user_cdf ||
	    !g->tag_cdf)
		return -1;
	gen_zipf_init(g->key_cdf, nkeys);
	gen_zipf_init(g->user_cdf, nusers);
	gen_zipf_init(g->tag_cdf, ntags);
	gen_zipf_init(g->model_cdf, GEN_NMODELS);
	for (i = 0; i < nkeys; i++)
		for (j = 0; j < GEN_KEY_MODELS; j++) {
			do {
				g->key_model[i][j] = (unsigned char)gen_zipf_pick(g->model_cdf, GEN_NMODELS,
				                                                  &g->rng);
				for (k = 0; k < j && g->key_model[i][k] != g->key_model[i][j]; k++)
					;
			} while (k < j);
		}
	return 0;
}

/* ---- one row ---- */

static void gen_no_usage(struct acct_row *r)
{
	r->prompt_tokens = r->completion_tokens = r->cached_tokens = ACCT_NONE;
	r->cache_creation_tokens = r->reasoning_tokens = ACCT_NONE;
	r->cache_creation_1h_tokens = r->audio_input_tokens = r->audio_output_tokens = ACCT_NONE;
	r->web_search_calls = ACCT_NONE;
	r->service_tier[0] = '\0';
	r->usage_source = ACCT_USAGE_NONE;
}

/* Token counts as m's provider reports them: OpenAI always reports cached and
 * reasoning counts (0 when none) and the tier that served the request, audio counts on
 * audio requests (a few, on models that price audio); Anthropic cache reads and writes
 * (the hour-long writes apart), web searches on the requests that ran some, and a
 * long prompt now and then on the model with a long-context card; vLLM none of them. */
static void gen_usage(struct gen_rng *rng, const struct gen_model *m, struct acct_row *r)
{
	int64_t prompt = gen_clamp(gen_rng_lognormal(rng, 900, 1.3), 50, 20000);
	int64_t completion = gen_clamp(gen_rng_lognormal(rng, m->reasoning ? 500 : 220, 1.0),
	                               10, 4000);

	r->cached_tokens = r->cache_creation_tokens = r->reasoning_tokens = ACCT_NONE;
	if (strcmp(m->provider, "openai") == 0) {
		/* OpenAI caches whole 128-token blocks of prompts from 1024 tokens on. */
		r->cached_tokens = prompt >= 1024 && gen_rng_unit(rng) < 0.3
			? (int64_t)(prompt * gen_rng_between(rng, 0.3, 0.9)) / 128 * 128 : 0;
		r->reasoning_tokens = m->reasoning
			? (int64_t)(completion * gen_rng_between(rng, 0.3, 0.85)) : 0;
		snprintf(r->service_tier, sizeof(r->service_tier), "default");
		if (m->prices.audio_input != GEN_U && gen_rng_unit(rng) < 0.05) {
			r->audio_input_tokens = (int64_t)((prompt - r->cached_tokens) *
			                                  gen_rng_between(rng, 0.3, 0.9));
			r->audio_output_tokens = (int64_t)(completion * gen_rng_between(rng, 0.5, 0.95));
		} else if (gen_has_tier(m, "priority") && gen_rng_unit(rng) < 0.08) {
			snprintf(r->service_tier, sizeof(r->service_tier), "priority");
		}
	} else if (strcmp(m->provider, "anthropic") == 0) {
		if (gen_has_tier(m, "default") && gen_rng_unit(rng) < 0.02)
			prompt = GEN_LONG_PROMPT + 1 + (int64_t)gen_rng_between(rng, 0, 300000);
		r->cached_tokens = gen_rng_unit(rng) < 0.25
			? (int64_t)(prompt * gen_rng_between(rng, 0.3, 0.9)) : 0;
		r->cache_creation_tokens = gen_rng_unit(rng) < 0.1
			? (int64_t)((prompt - r->cached_tokens) * gen_rng_between(rng, 0.1, 0.6)) : 0;
		r->cache_creation_1h_tokens = r->cache_creation_tokens && gen_rng_unit(rng) < 0.3
			? (int64_t)(r->cache_creation_tokens * gen_rng_between(rng, 0.2, 1.0)) : 0;
		if (gen_rng_unit(rng) < 0.06)
			r->web_search_calls = 1 + (int64_t)(gen_rng_unit(rng) * 5);
	}
	r->prompt_tokens = prompt;
	r->completion_tokens = completion;
	r->usage_source = r->stream == 1 ? ACCT_USAGE_STREAM : ACCT_USAGE_RESPONSE;
}

/* Timings and sizes: a stream's headers come at its first token, a unary answer's
 * after the whole generation. */
static void gen_timing(struct gen_rng *rng, const struct gen_model *m, struct acct_row *r)
{
	double ttfb = gen_rng_lognormal(rng, m->ttfb_ms, 0.5);
	double decode = (double)r->completion_tokens * gen_rng_lognormal(rng, m->ms_per_token, 0.3);

	r->duration_ms = (int64_t)(ttfb + decode);
	r->ttfb_ms = r->stream == 1 ? (int64_t)ttfb
	                            : r->duration_ms - (int64_t)gen_rng_between(rng, 0, 5);
	if (r->ttfb_ms < 0)
		r->ttfb_ms = 0;
	r->bytes_in = GEN_HEADER_BYTES +
	              (int64_t)((double)r->prompt_tokens * 4 * gen_rng_between(rng, 0.8, 1.2));
	r->bytes_out = r->stream == 1 ? 300 + r->completion_tokens * 38
	                              : 500 + r->completion_tokens * 42 / 10;
}

/* Turns a complete row into a failure of each kind, by u in [0, 1). */
static void gen_failure(struct gen_rng *rng, const struct gen_model *m, struct acct_row *r,
                        double u)
{
	static const int upstream_5xx[] = { 500, 502, 503, 504 };
	static const int upstream_4xx[] = { 429, 429, 429, 400, 400, 404 };
	enum decision_verdict denial;

	if (u < 0.30) {
		r->outcome = ACCT_UPSTREAM_ERROR;
		r->status = upstream_5xx[gen_rng_next(rng) % 4];
		if (r->status == 504) {          /* HAProxy's server timeout before headers */
			snprintf(r->termination, sizeof(r->termination), "sH");
			r->ttfb_ms = ACCT_NONE;
			r->duration_ms = 60000 + (int64_t)gen_rng_between(rng, 0, 50);
		} else {
			r->duration_ms = r->ttfb_ms = gen_clamp(gen_rng_lognormal(rng, 300, 0.8), 1, 30000);
		}
		gen_no_usage(r);
		r->bytes_out = 350;
	} else if (u < 0.60) {
		r->outcome = ACCT_UPSTREAM_REJECTED;
		r->status = upstream_4xx[gen_rng_next(rng) % 6];
		r->duration_ms = r->ttfb_ms = gen_clamp(gen_rng_lognormal(rng, 120, 0.5), 1, 5000);
		gen_no_usage(r);
		r->bytes_out = 380;
	} else if (u < 0.75) {
		double part = gen_rng_between(rng, 0.05, 0.9);

		r->outcome = ACCT_CLIENT_ABORT;
		snprintf(r->termination, sizeof(r->termination), "CD");
		r->duration_ms = r->ttfb_ms + (int64_t)((double)(r->duration_ms - r->ttfb_ms) * part);
		r->bytes_out = (int64_t)((double)r->bytes_out * part);
		/* Only an Anthropic stream has reported its input (message_start) by then. */
		if (r->stream == 1 && strcmp(m->provider, "anthropic") == 0) {
			r->completion_tokens = r->web_search_calls = ACCT_NONE;
			r->usage_source = ACCT_USAGE_PARTIAL;
		} else {
			gen_no_usage(r);
		}
	} else if (u < 0.95) {
		denial = gen_rng_unit(rng) < 0.7 ? DECISION_RPM_LIMITED : DECISION_BUDGET_EXCEEDED;
		r->outcome = ACCT_DENIED;
		r->status = decision_http_status(denial);
		snprintf(r->verdict, sizeof(r->verdict), "%s", decision_verdict_name(denial));
		snprintf(r->termination, sizeof(r->termination), "PR");
		r->provider[0] = '\0';           /* never forwarded */
		gen_no_usage(r);
		r->ttfb_ms = ACCT_NONE;
		r->duration_ms = gen_clamp(gen_rng_lognormal(rng, 1, 0.7), 0, 50);
		r->bytes_out = 260;
	} else {
		r->outcome = ACCT_NO_RECORD;
		r->status = 0;
		r->termination[0] = '\0';
		gen_no_usage(r);
		r->duration_ms = r->ttfb_ms = r->bytes_in = r->bytes_out = ACCT_NONE;
	}
}

/* What the agent's decision estimates of a request (decision_estimate): its body
 * bytes / 4, and the max_tokens the client named, a bound above what it used. */
static void gen_decision_estimate(struct acct_row *r)
{
	int64_t bound = 256;

	while (bound < r->completion_tokens)
		bound *= 2;
	r->est_prompt_tokens = (r->bytes_in - GEN_HEADER_BYTES + 3) / 4;
	r->est_completion_tokens = bound;
}

/* 0 to 3 tags into r (canonical text, tags.h): tag rank i is name i mod 4, value
 * v<i / 4 + 1>, popular as keys are; a name drawn twice is kept once. */
static void gen_tags(struct gen *g, struct acct_row *r)
{
	static const char *const names[] = { "env", "feature", "region", "tenant" };
	char list[4 * TAGS_TAG_MAX];
	size_t n = gen_rng_next(&g->tag_rng) % 4, i, rank, used = 0, len = 0;
	struct tags t;

	list[0] = '\0';
	for (i = 0; i < n; i++) {
		rank = gen_zipf_pick(g->tag_cdf, g->ntags, &g->tag_rng);
		if (used & (1u << (rank % 4)))
			continue;
		used |= 1u << (rank % 4);
		len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s=v%zu", len ? "," : "",
		                        names[rank % 4], rank / 4 + 1);
	}
	if (tags_parse(list, strlen(list), &t) == TAGS_OK)
		tags_format(&t, r->tags, sizeof(r->tags));
}

/* The next random row, started at started_ms. */
static void gen_row(struct gen *g, int64_t started_ms, struct acct_row *r)
{
	struct gen_rng *rng = &g->rng;
	size_t key = gen_zipf_pick(g->key_cdf, g->nkeys, rng);
	double pick = gen_rng_unit(rng);
	size_t mi = g->key_model[key][pick < 0.75 ? 0 : pick < 0.95 ? 1 : 2];
	const struct gen_model *m = &gen_models[mi];
	double fail = gen_rng_unit(rng);

	acct_row_init(r);
	/* tally.cfg's unique-id-format: accept time in ms, pid, request counter, rand(). */
	snprintf(r->request_id, sizeof(r->request_id), "%" PRId64 "-%X-%" PRIX64 "-%016" PRIX64,
	         started_ms, g->pid, ++g->counter, gen_rng_next(rng) & 0x7fffffff);
	r->key_id = g->key_ids[key];
	r->team_id = g->key_teams[key];
	/* Popular as keys are: a few end users make most of a key's calls. */
	if (g->nusers)
		snprintf(r->end_user, sizeof(r->end_user), "user-%zu",
		         gen_zipf_pick(g->user_cdf, g->nusers, &g->user_rng) + 1);
	if (g->ntags)
		gen_tags(g, r);
	snprintf(r->model, sizeof(r->model), "%s", m->name);
	snprintf(r->model_requested, sizeof(r->model_requested), "%s", m->name);
	snprintf(r->provider, sizeof(r->provider), "%s", m->provider);
	snprintf(r->verdict, sizeof(r->verdict), "%s", decision_verdict_name(DECISION_ALLOW));
	snprintf(r->termination, sizeof(r->termination), "--");
	r->status = 200;
	r->stream = gen_rng_unit(rng) < GEN_STREAM_SHARE;
	r->outcome = ACCT_COMPLETE;
	r->started_at_ms = started_ms;
	gen_usage(rng, m, r);
	gen_timing(rng, m, r);
	gen_decision_estimate(r);
	if (fail < GEN_ERROR_SHARE)
		gen_failure(rng, m, r, fail / GEN_ERROR_SHARE);
	else if (r->stream == 0 && fail < GEN_ERROR_SHARE + GEN_OVERFLOW_SHARE)
		gen_no_usage(r);
	/* As the intake: the reported cost, then an estimate of what went unreported
	 * (cut, lost or no record), priced alike. */
	acct_price(r, g->prices[mi]);
	acct_estimate(r, g->prices[mi]);
}

/* ---- the agent's accounting path ---- */

struct gen_sink {
	struct queue *q;
	struct writer *w;
	uint64_t written0, duplicates0, dropped0, t0_ns;
};

/* Continues the counters from the database's accounting row, as the agent does at
 * start-up, and starts the writer. db: the caller's connection, closed here. */
static int gen_sink_start(struct gen_sink *s, struct db *db, const struct gen_opts *o)
{
	struct writer_config cfg = { .db_path = o->db, .node = o->node };
	char err[512];
	int rc = writer_load_counters(db, o->node, err, sizeof(err));

	db_close(db);
	memset(s, 0, sizeof(*s));
	if (rc < 0) {
		fprintf(stderr, "tally-gen: %s\n", err);
		return -1;
	}
	s->written0 = counters_now().written;
	s->duplicates0 = counters_now().duplicates;
	s->dropped0 = counters_now().dropped;
	s->q = cfg.queue = queue_new(GEN_QUEUE_ROWS);
	if (!s->q) {
		fprintf(stderr, "tally-gen: out of memory\n");
		return -1;
	}
	s->w = writer_start(&cfg, err, sizeof(err));
	if (!s->w) {
		fprintf(stderr, "tally-gen: %s\n", err);
		queue_free(s->q);
		return -1;
	}
	s->t0_ns = stats_now_ns();
	return 0;
}

/* As the intake: received is counted before the push. Unlike the intake, a full queue
 * is waited out, never a drop. */
static void gen_sink_push(struct gen_sink *s, const struct acct_row *r)
{
	counters_receive();
	while (queue_push(s->q, r) < 0)
		nanosleep(&(struct timespec){ 0, GEN_WAIT_NS }, NULL);
}

/* Drains the queue, stops the writer and prints what was stored. 0, or -1 if a row
 * was dropped (the database failed). */
static int gen_sink_stop(struct gen_sink *s)
{
	uint64_t written, duplicates, dropped;
	double secs;

	writer_stop(s->w);
	queue_free(s->q);
	secs = (double)(stats_now_ns() - s->t0_ns) / 1e9;
	written = counters_now().written - s->written0;
	duplicates = counters_now().duplicates - s->duplicates0;
	dropped = counters_now().dropped - s->dropped0;
	printf("tally-gen: %" PRIu64 " rows written (%" PRIu64 " duplicates, %" PRIu64
	       " dropped) in %.2f s: %.0f rows/s\n", written, duplicates, dropped, secs,
	       secs > 0 ? (double)written / secs : 0.0);
	return dropped ? -1 : 0;
}

/* ---- modes ---- */

/* Reads every row of path ("-": stdin) into *rows before anything is stored; blank
 * lines are skipped. 0, or -1 with the file and line of the first bad one. */
static int gen_ndjson_read(const char *path, struct acct_row **rows, size_t *n)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
	size_t cap = 0, lineno = 0, linecap = 0;
	char *line = NULL, err[256];
	ssize_t len;
	int rc = -1;

	*rows = NULL;
	*n = 0;
	if (!f) {
		fprintf(stderr, "tally-gen: %s: %s\n", path, strerror(errno));
		return -1;
	}
	while ((len = getline(&line, &linecap, f)) >= 0) {
		lineno++;
		if (strspn(line, " \t\r\n") == (size_t)len)
			continue;
		if (*n == cap) {
			struct acct_row *grown = realloc(*rows, (cap = cap ? cap * 2 : 1024) * sizeof(**rows));

			if (!grown) {
				fprintf(stderr, "tally-gen: out of memory\n");
				goto out;
			}
			*rows = grown;
		}
		if (ndjson_row_parse(line, (size_t)len, &(*rows)[*n], err, sizeof(err)) < 0) {
			fprintf(stderr, "tally-gen: %s:%zu: %s\n", path, lineno, err);
			goto out;
		}
		(*n)++;
	}
	if (ferror(f))
		fprintf(stderr, "tally-gen: %s: %s\n", path, strerror(errno));
	else
		rc = 0;
out:
	free(line);
	if (f != stdin)
		fclose(f);
	return rc;
}

/* Span mode: o->rows rows over the span. Live mode: rows stamped now, for the
 * duration, at most o->rows, paced at o->rate when set. */
static void gen_random(struct gen *g, struct gen_sink *s, const struct gen_opts *o)
{
	uint64_t i, t0 = stats_now_ns(), now, due;
	uint64_t limit = o->rows >= 0 ? (uint64_t)o->rows : UINT64_MAX;
	struct acct_row row;

	for (i = 0; i < limit; i++) {
		if (o->duration_s > 0) {
			now = stats_now_ns();
			if ((double)(now - t0) >= o->duration_s * 1e9)
				break;
			due = o->rate > 0 ? t0 + (uint64_t)((double)i * 1e9 / o->rate) : now;
			if (due > now)
				nanosleep(&(struct timespec){ (time_t)((due - now) / 1000000000),
				                              (long)((due - now) % 1000000000) }, NULL);
			gen_row(g, acct_now_ms(), &row);
		} else {
			gen_row(g, gen_span_time(g, i, limit), &row);
		}
		gen_sink_push(s, &row);
	}
}

/* ---- command line ---- */

enum gen_opt_id { OPT_DB, OPT_NDJSON, OPT_SECRET, OPT_NODE, OPT_ROWS, OPT_SEED, OPT_DAYS, OPT_END, OPT_KEYS,
                  OPT_TEAMS, OPT_END_USERS, OPT_TAGS, OPT_DURATION, OPT_RATE, OPT_COUNT };

static const struct gen_optspec {
	const char *name;
	char kind;                /* s: string, i: long long, r: double */
	size_t off;
	double min, max;
} gen_optspecs[OPT_COUNT] = {
	[OPT_DB] = { "--db", 's', offsetof(struct gen_opts, db), 0, 0 },
	[OPT_NDJSON] = { "--ndjson", 's', offsetof(struct gen_opts, ndjson), 0, 0 },
	[OPT_SECRET] = { "--secret", 's', offsetof(struct gen_opts, secret), 0, 0 },
	[OPT_NODE] = { "--node", 's', offsetof(struct gen_opts, node), 0, 0 },
	[OPT_ROWS] = { "--rows", 'i', offsetof(struct gen_opts, rows), 0, 1e12 },
	[OPT_SEED] = { "--seed", 'i', offsetof(struct gen_opts, seed), 0, 9e18 },
	[OPT_DAYS] = { "--days", 'i', offsetof(struct gen_opts, days), 1, GEN_MAX_DAYS },
	[OPT_END] = { "--end", 'i', offsetof(struct gen_opts, end_s), 0, 1e11 },
	[OPT_KEYS] = { "--keys", 'i', offsetof(struct gen_opts, keys), 1, GEN_MAX_KEYS },
	[OPT_TEAMS] = { "--teams", 'i', offsetof(struct gen_opts, teams), 0, GEN_MAX_TEAMS },
	[OPT_END_USERS] = { "--end-users", 'i', offsetof(struct gen_opts, end_users), 0,
	                    GEN_MAX_END_USERS },
	[OPT_TAGS] = { "--tags", 'i', offsetof(struct gen_opts, tags), 0, GEN_MAX_TAGS },
	[OPT_DURATION] = { "--duration", 'r', offsetof(struct gen_opts, duration_s), 0.001, 1e7 },
	[OPT_RATE] = { "--rate", 'r', offsetof(struct gen_opts, rate), 0.001, 1e9 },
};

static int gen_usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "tally-gen: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n%s", gen_usage_text);
	return -1;
}

/* Stores value s of option spec into o. 0, or -1 if it is not a number in range. */
static int gen_opt_set(const struct gen_optspec *spec, const char *s, struct gen_opts *o)
{
	char *p = (char *)o + spec->off, *end = NULL;
	long long ll;
	double d;

	if (spec->kind == 's') {
		memcpy(p, &s, sizeof(s));
		return *s ? 0 : -1;
	}
	errno = 0;
	if (spec->kind == 'i') {
		ll = strtoll(s, &end, 10);
		d = (double)ll;
	} else {
		d = strtod(s, &end);
	}
	if (errno || end == s || *end || !(d >= spec->min && d <= spec->max))
		return -1;
	if (spec->kind == 'i')
		memcpy(p, &ll, sizeof(ll));
	else
		memcpy(p, &d, sizeof(d));
	return 0;
}

/* 0 with *o filled, 1 after printing the help, -1 after a usage error. */
static int gen_parse_args(int argc, char **argv, struct gen_opts *o)
{
	unsigned given = 0;
	int i, k;

	*o = (struct gen_opts){ .rows = -1, .seed = 1, .days = 30, .end_s = -1, .keys = 200 };
	for (i = 1; i < argc; i += 2) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			fputs(gen_usage_text, stdout);
			return 1;
		}
		for (k = 0; k < OPT_COUNT && strcmp(argv[i], gen_optspecs[k].name) != 0; k++)
			;
		if (k == OPT_COUNT)
			return gen_usage_error("unknown option %s", argv[i]);
		if (i + 1 == argc)
			return gen_usage_error("%s needs a value", argv[i]);
		if (given & (1u << k))
			return gen_usage_error("%s given twice", argv[i]);
		given |= 1u << k;
		if (gen_opt_set(&gen_optspecs[k], argv[i + 1], o) < 0)
			return gen_usage_error("bad value for %s", argv[i]);
	}
	if (!(given & (1u << OPT_DB)))
		return gen_usage_error("%s is required", "--db");
	if ((given & (1u << OPT_NDJSON)) &&
	    (given & ~((1u << OPT_DB) | (1u << OPT_NDJSON) | (1u << OPT_NODE))))
		return gen_usage_error("%s takes no other option than --db and --node", "--ndjson");
	if (o->ndjson)
		return 0;
	if ((given & (1u << OPT_DURATION)) && (given & ((1u << OPT_DAYS) | (1u << OPT_END))))
		return gen_usage_error("%s stamps rows with the current time: no --days or --end", "--duration");
	if ((given & (1u << OPT_RATE)) && !(given & (1u << OPT_DURATION)))
		return gen_usage_error("%s needs --duration", "--rate");
	if (!(given & ((1u << OPT_ROWS) | (1u << OPT_DURATION))))
		return gen_usage_error("one of --rows, --duration or --ndjson is required%s", "");
	return 0;
}

int main(int argc, char **argv)
{
	struct gen_opts o;
	struct acct_row *rows = NULL;
	struct gen g = { 0 };
	struct gen_sink s;
	size_t nrows = 0, i;
	struct db *db = NULL;
	char err[512];
	int rc = gen_parse_args(argc, argv, &o), status = 2;
	int64_t end, created;

	if (rc != 0)
		return rc > 0 ? 0 : 2;
	if (o.ndjson && gen_ndjson_read(o.ndjson, &rows, &nrows) < 0)
		goto out;
	status = 1;
	if (db_open(o.db, DB_CREATE, &db, err, sizeof(err)) < 0) {
		fprintf(stderr, "tally-gen: %s\n", err);
		goto out;
	}
	if (!o.ndjson) {
		/* Keys exist a day before their first rows. A live run's request ids carry
		 * its real pid, so that concurrent runs never collide; a span's the seed's. */
		end = o.end_s >= 0 ? o.end_s : db_now();
		created = (o.duration_s > 0 ? end : end - o.days * GEN_DAY_S) - GEN_DAY_S;
		if (gen_init(&g, (uint64_t)o.seed, (size_t)o.keys, (size_t)o.teams,
		             (size_t)o.end_users, (size_t)o.tags,
		             o.duration_s > 0 ? (unsigned)getpid()
		                              : 0x100 + (unsigned)(gen_mix((uint64_t)o.seed) % 0xff00)) < 0 ||
		    (o.duration_s <= 0 && gen_span_init(&g, end, o.days) < 0)) {
			fprintf(stderr, "tally-gen: out of memory\n");
			goto out;
		}
		if (gen_catalogue(db, &g, &o, created) < 0)
			goto out;
	}
	rc = gen_sink_start(&s, db, &o);
	db = NULL;
	if (rc < 0)
		goto out;
	if (o.ndjson)
		for (i = 0; i < nrows; i++)
			gen_sink_push(&s, &rows[i]);
	else
		gen_random(&g, &s, &o);
	status = gen_sink_stop(&s) < 0 ? 1 : 0;
out:
	db_close(db);
	free(rows);
	gen_free(&g);
	return status;
}
