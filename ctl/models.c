/* models: model set (the model row and its default rate card) and model list.
 * tallyctl is single-threaded. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "models.h"
#include "prices.h"

int models_set(struct ctl *ctl, const struct ctl_args *a)
{
	const char *name = a->operand, *provider = a->val[OPT_PROVIDER];
	struct prices_card card = { .tier = "default" };
	int64_t provider_id, model_id, max_output = 0;
	int status = CTL_FAIL, found, existed;

	if (!args_valid_model(name))
		return ctl_usage(ctl->cmd, "invalid model name '%s': use 1-%d characters from "
		                 "A-Z a-z 0-9 . _ - : / @ +", name, CTL_MODEL_MAX);
	/* The prices go to the default card for every prompt size; one not given stays
	 * unknown on a new card, unchanged on an existing one. */
	if (prices_card_parse_prices(ctl->cmd, a, &card) != CTL_OK)
		return CTL_USAGE;
	if (a->val[OPT_MAX_OUTPUT] && strcmp(a->val[OPT_MAX_OUTPUT], "none") != 0 &&
	    args_parse_int(ctl->cmd, OPT_MAX_OUTPUT, a->val[OPT_MAX_OUTPUT], 1, PRICES_TOKENS_MAX,
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
	                   prices_card_write(ctl, model_id, &card, 1) < 0 ||
	                   prices_warn_unpriced(ctl, model_id, name) < 0))
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

int models_list(struct ctl *ctl, const struct ctl_args *a)
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
	return ctl_print_table(ctl, CTL_SQL(MODEL_LIST_SQL), cols,
	                       (int)(sizeof(cols) / sizeof(cols[0])), ctl_list_printer(a), "");
#undef MODEL_LIST_SQL
}
