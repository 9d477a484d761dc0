/* prices: rate cards (model_prices): parsed from options, written, listed (text or
 * the tally import format) and deleted. tallyctl is single-threaded. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "prices.h"
#include "tier.h"

const struct prices_field prices_fields[PRICE_CLASSES] = {
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

/* Parses the price options in a into c. */
int prices_card_parse_prices(const struct ctl_command *cmd, const struct ctl_args *a,
                             struct prices_card *c)
{
	int i;

	for (i = 0; i < PRICE_CLASSES; i++) {
		const char *v = a->val[prices_fields[i].opt];

		if (!v)
			continue;
		if (args_parse_int(cmd, prices_fields[i].opt, v, 0, PRICES_MICROS_MAX,
		                   i == PRICE_WEB_SEARCH ? " (micro-dollars per call)" :
		                   " (micro-dollars per million tokens)", &c->price[i]) != CTL_OK)
			return CTL_USAGE;
		c->known |= 1u << i;
	}
	return CTL_OK;
}

/* Parses --tier (default "default") and --above (default 0) into c. */
static int prices_card_parse_key(const struct ctl_command *cmd, const struct ctl_args *a,
                                 struct prices_card *c)
{
	c->tier = a->val[OPT_TIER] ? a->val[OPT_TIER] : "default";
	if (!tier_name_ok(c->tier, strlen(c->tier)))
		return ctl_usage(cmd, "invalid value '%s' for --tier: use 1-%d characters from "
		                 "a-z 0-9 _ -", c->tier, TIER_NAME_MAX - 1);
	c->above = 0;
	if (!a->val[OPT_ABOVE])
		return CTL_OK;
	return args_parse_int(cmd, OPT_ABOVE, a->val[OPT_ABOVE], 0, PRICES_TOKENS_MAX, " (prompt tokens)",
	                      &c->above);
}

/* Writes card c of model model_id inside the caller's transaction. merge: a price c
 * does not know keeps its stored value; else the card is replaced whole. 0 or -1.
 * The stored row's columns are named with their table in DO UPDATE: PostgreSQL finds
 * a bare name there ambiguous (it could be excluded's). */
int prices_card_write(struct ctl *ctl, int64_t model_id, const struct prices_card *c, int merge)
{
	const int64_t *p[PRICE_CLASSES];
	int i;

	_Static_assert(PRICE_CLASSES == 9, "the card SQL binds nine prices in prices_fields order");
	for (i = 0; i < PRICE_CLASSES; i++)
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
int prices_warn_unpriced(struct ctl *ctl, int64_t model_id, const char *name)
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
static int prices_begin_model(struct ctl *ctl, const char *name, int64_t *id)
{
	if (ctl_db_open(ctl) != CTL_OK || ctl_begin(ctl) != CTL_OK)
		return CTL_FAIL;
	return ctl_model_id(ctl, name, id);
}

int prices_set(struct ctl *ctl, const struct ctl_args *a)
{
	struct prices_card card = { 0 };
	int64_t model_id;
	int status, existed;

	status = prices_card_parse_key(ctl->cmd, a, &card);
	if (status == CTL_OK)
		status = prices_card_parse_prices(ctl->cmd, a, &card);
	if (status != CTL_OK)
		return status;
	if (!card.known)
		return ctl_usage(ctl->cmd, "nothing to set: give at least one price");

	status = CTL_FAIL;
	if (prices_begin_model(ctl, a->operand, &model_id) != CTL_OK)
		goto out;
	existed = ctl_find(ctl, NULL, "SELECT 1 FROM model_prices WHERE model_id = ?1 AND tier = ?2"
	                   " AND above_tokens = ?3", "iti", model_id, card.tier, card.above);
	if (existed < 0 || prices_card_write(ctl, model_id, &card, 1) < 0 ||
	    prices_warn_unpriced(ctl, model_id, a->operand) < 0 || ctl_commit(ctl) != CTL_OK)
		goto out;
	printf("%s card of model %s: tier %s above %lld tokens\n", existed ? "updated" : "created",
	       a->operand, card.tier, (long long)card.above);
	status = CTL_OK;
out:
	if (status != CTL_OK)
		ctl_rollback(ctl);
	return status;
}

int prices_delete(struct ctl *ctl, const struct ctl_args *a)
{
	struct prices_card card = { 0 };
	int64_t model_id;
	int status, changed;

	status = prices_card_parse_key(ctl->cmd, a, &card);
	if (status != CTL_OK)
		return status;
	status = CTL_FAIL;
	if (prices_begin_model(ctl, a->operand, &model_id) != CTL_OK)
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
static int prices_json(struct ctl *ctl, struct db_stmt *st, const struct ctl_col *cols,
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

int prices_list(struct ctl *ctl, const struct ctl_args *a)
{
	struct ctl_col cols[3 + PRICE_CLASSES] = {
		{ "MODEL", "model", COL_TEXT },
		{ "TIER", "tier", COL_TEXT },
		{ "ABOVE", "above_tokens", COL_INT },
	};
	int64_t id;
	int i;

	for (i = 0; i < PRICE_CLASSES; i++)
		cols[3 + i] = (struct ctl_col){ prices_fields[i].header, pricecard_columns[i], COL_INT };
	if (a->operand && (ctl_db_open(ctl) != CTL_OK || ctl_model_id(ctl, a->operand, &id) != CTL_OK))
		return CTL_FAIL;
	/* The price columns in prices_fields order; the default tier first. The CAST gives
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
	return ctl_print_table(ctl, CTL_SQL(PRICES_LIST_SQL), cols, 3 + PRICE_CLASSES,
	                       a->val[OPT_JSON] ? prices_json : ctl_table_text, "t", a->operand);
#undef PRICES_LIST_SQL
}
