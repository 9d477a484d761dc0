/* modelbudgets: budgets per model (modelbudget set, list, delete; docs/limits.md,
 * "Budgets per model"): what a key, or a team's keys together, may spend on one model
 * per period, on top of the key's or team's budget for every model. The owner is named
 * as end users' limits name it (ctl_scope_*), the budget and its period are parsed as a
 * key's (limits.c). tallyctl is single-threaded. */
#include "modelbudgets.h"

#include <stdio.h>

#include "limits.h"
#include "modelbudget.h"

#define MODELBUDGETS_WHOSE "whose budget this is"
/* The configuration's generation row, which every configuration write locks (a trigger
 * bumps it): taken first, on PostgreSQL, it makes two sets that add budgets to one
 * owner take turns in the order every writer takes locks in, and the second counts the
 * first's row (SQLite's write transaction already serialises them). */
#define MODELBUDGETS_TURN ((struct ctl_sql){                                              \
	"SELECT value FROM meta WHERE name = 'config_generation'",                       \
	"SELECT value FROM meta WHERE name = 'config_generation' FOR UPDATE" })

/* What the budget is called in messages: "model M of key K" (or team). */
static void modelbudgets_who(const struct ctl_args *a, char *buf, size_t cap)
{
	char what[256];

	snprintf(what, sizeof(what), "model %s", a->operand);
	ctl_scope_who(a, what, buf, cap);
}

/* Writes the budget inside the caller's transaction: a new row needs --budget-usd, an
 * existing one keeps what is not given. */
static int modelbudgets_write(struct ctl *ctl, const char *col, int64_t id, const char *model,
                              const struct limits *l, const char *who)
{
	const int64_t *budget = l->bound[LIMITS_BUDGET];
	char sql[512];
	int changed;

	if (budget) {
		int64_t others = 0;

		/* The agent lists an owner's budgets in one answer (modelbudget.h). */
		if (ctl_find(ctl, NULL, ctl_sql_of(ctl, MODELBUDGETS_TURN), "") < 0)
			return CTL_FAIL;
		snprintf(sql, sizeof(sql), "SELECT count(*) FROM model_budgets WHERE %s = ?1"
		         " AND model <> ?2", col);
		if (ctl_find(ctl, &others, sql, "it", id, model) < 0)
			return CTL_FAIL;
		if (others >= MODELBUDGET_PER_OWNER_MAX)
			return ctl_error("%s: a key or a team has at most %d budgets per model",
			                 who, MODELBUDGET_PER_OWNER_MAX);
		snprintf(sql, sizeof(sql), "INSERT INTO model_budgets (%s, model, created_at,"
		         " budget_micros, budget_period) VALUES (?1, ?2, ?3, ?4, coalesce(?5, 'month'))"
		         " ON CONFLICT (%s, model) DO UPDATE SET budget_micros = excluded.budget_micros,"
		         " budget_period = coalesce(?5, model_budgets.budget_period)", col, col);
		return ctl_exec(ctl, sql, "itiit", id, model, db_now(), *budget, l->period) < 0 ?
			CTL_FAIL : CTL_OK;
	}
	snprintf(sql, sizeof(sql), "UPDATE model_budgets SET budget_period = ?3"
	         " WHERE %s = ?1 AND model = ?2", col);
	changed = ctl_exec(ctl, sql, "itt", id, model, l->period);
	if (changed == 0)
		return ctl_error("%s has no budget: give --budget-usd to set one", who);
	return changed > 0 ? CTL_OK : CTL_FAIL;
}

int modelbudgets_set(struct ctl *ctl, const struct ctl_args *a)
{
	const char *model = a->operand, *col;
	struct limits l = { 0 };
	char who[512];
	int64_t id, model_id;
	int status;

	modelbudgets_who(a, who, sizeof(who));
	status = ctl_scope_check(ctl->cmd, a, MODELBUDGETS_WHOSE);
	if (status == CTL_OK && !a->val[OPT_BUDGET_USD] && !a->val[OPT_BUDGET_PERIOD])
		status = ctl_usage(ctl->cmd, "nothing to set: give --budget-usd or --budget-period");
	if (status == CTL_OK)
		status = limits_parse(ctl->cmd, a, &l);
	/* A model without a budget has no row: none would mean modelbudget delete. */
	if (status == CTL_OK && l.given[LIMITS_BUDGET] && !l.bound[LIMITS_BUDGET])
		status = ctl_usage(ctl->cmd, "the budget of %s cannot be none: 'tallyctl modelbudget"
		                   " delete' removes it", who);
	if (status != CTL_OK)
		goto out;
	status = CTL_FAIL;
	if (ctl_db_open(ctl) != CTL_OK || ctl_begin(ctl) != CTL_OK ||
	    ctl_scope_id(ctl, a, &col, &id) != CTL_OK ||
	    ctl_model_id(ctl, model, &model_id) != CTL_OK ||
	    modelbudgets_write(ctl, col, id, model, &l, who) != CTL_OK || ctl_commit(ctl) != CTL_OK) {
		ctl_rollback(ctl);
		goto out;
	}
	printf("set budget of %s\n", who);
	status = CTL_OK;
out:
	limits_free(&l);
	return status;
}

int modelbudgets_list(struct ctl *ctl, const struct ctl_args *a)
{
	static const struct ctl_col cols[] = {
		CTL_SCOPE_COLS,
		{ "MODEL", "model", COL_TEXT },
		{ "BUDGET_USD", "budget_micros", COL_USD },
		{ "PERIOD", "budget_period", COL_TEXT },
		{ "CREATED", "created_at", COL_TIME },
	};

#define MODELBUDGETS_LIST_SQL(C)                                                        \
	"SELECT k.name, t.name, l.model, l.budget_micros, l.budget_period, l.created_at"  \
	CTL_SCOPE_FROM("model_budgets", C) ", l.model" C
	return ctl_scope_list(ctl, a, CTL_SQL(MODELBUDGETS_LIST_SQL), cols,
	                      (int)(sizeof(cols) / sizeof(cols[0])));
#undef MODELBUDGETS_LIST_SQL
}

int modelbudgets_delete(struct ctl *ctl, const struct ctl_args *a)
{
	char who[512];
	int status = ctl_scope_check(ctl->cmd, a, MODELBUDGETS_WHOSE);

	if (status != CTL_OK)
		return status;
	modelbudgets_who(a, who, sizeof(who));
	return ctl_scope_delete(ctl, a, "model_budgets", "model", a->operand, "budget", who,
	                        "has no budget (see 'tallyctl modelbudget list')");
}
