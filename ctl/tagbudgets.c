/* tagbudgets: budgets of tags (set, list, delete; docs/limits.md, "Tags"). A request
 * carrying a budgeted tag is admitted only if the tag's budget, spent by every key's
 * requests carrying it (tag_total_daily), admits it too. The budget and its period are
 * parsed as a key's (limits.c). tallyctl is single-threaded. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "limits.h"
#include "period.h"
#include "tagbudgets.h"

/* Writes the budget of tag inside the caller's transaction: a new tag needs one, an
 * existing one keeps what is not given. */
static int tagbudgets_write(struct ctl *ctl, const char *tag, const struct limits *l)
{
	const int64_t *budget = l->bound[LIMITS_BUDGET];
	int changed;

	if (budget)
		return ctl_exec(ctl, "INSERT INTO tag_budgets (tag, created_at, budget_micros,"
		                " budget_period) VALUES (?1, ?2, ?3, coalesce(?4, 'month'))"
		                " ON CONFLICT (tag) DO UPDATE SET budget_micros = excluded.budget_micros,"
		                " budget_period = coalesce(?4, tag_budgets.budget_period)",
		                "tiit", tag, db_now(), *budget, l->period) < 0 ? CTL_FAIL : CTL_OK;
	changed = ctl_exec(ctl, "UPDATE tag_budgets SET budget_period = ?2 WHERE tag = ?1", "tt",
	                   tag, l->period);
	if (changed == 0)
		return ctl_error("tag '%s' has no budget: give --budget-usd to set one", tag);
	return changed > 0 ? CTL_OK : CTL_FAIL;
}

int tagbudgets_set(struct ctl *ctl, const struct ctl_args *a)
{
	const char *tag = a->operand;
	struct limits l = { 0 };
	int status;

	status = args_check_tag(ctl->cmd, tag);
	if (status == CTL_OK)
		status = args_need_option(ctl->cmd, a);
	if (status == CTL_OK)
		status = limits_parse(ctl->cmd, a, &l);
	/* A tag without a budget has no row: none would mean tag delete. */
	if (status == CTL_OK && l.given[LIMITS_BUDGET] && !l.bound[LIMITS_BUDGET])
		status = ctl_usage(ctl->cmd, "a tag's budget cannot be none: 'tallyctl tag delete %s'"
		                   " removes it", tag);
	if (status == CTL_OK) {
		status = CTL_FAIL;
		if (ctl_db_open(ctl) == CTL_OK && ctl_begin(ctl) == CTL_OK &&
		    tagbudgets_write(ctl, tag, &l) == CTL_OK && ctl_commit(ctl) == CTL_OK) {
			printf("set budget of tag %s\n", tag);
			status = CTL_OK;
		} else {
			ctl_rollback(ctl);
		}
	}
	limits_free(&l);
	return status;
}

/* Spent is what every key's rows carrying the tag cost (reported and estimated) since
 * the start of the budget's period, the agent's UTC calendar. */
int tagbudgets_list(struct ctl *ctl, const struct ctl_args *a)
{
	static const struct ctl_col cols[] = {
		{ "TAG", "tag", COL_TEXT },
		{ "BUDGET_USD", "budget_micros", COL_USD },
		{ "PERIOD", "budget_period", COL_TEXT },
		{ "SPENT_USD", "spent_micros", COL_USD },
		{ "CREATED", "created_at", COL_TIME },
	};
	int64_t now_ms = db_now() * 1000;

#define TAGBUDGETS_LIST_SQL(C)                                                          \
	"SELECT b.tag, b.budget_micros, b.budget_period,"                                 \
	" (SELECT coalesce(sum(d.cost_micros + d.estimated_cost_micros), 0)"              \
	"  FROM tag_total_daily d WHERE d.tag = b.tag AND d.day >= CASE b.budget_period"  \
	"  WHEN 'day' THEN CAST(?1 AS BIGINT) WHEN 'week' THEN CAST(?2 AS BIGINT)"        \
	"  WHEN 'month' THEN CAST(?3 AS BIGINT) ELSE 0 END), b.created_at"                \
	" FROM tag_budgets b ORDER BY b.tag" C
	return ctl_print_table(ctl, CTL_SQL(TAGBUDGETS_LIST_SQL), cols,
	                       (int)(sizeof(cols) / sizeof(cols[0])), ctl_list_printer(a), "iii",
	                       period_start_ms(PERIOD_DAY, now_ms) / 1000,
	                       period_start_ms(PERIOD_WEEK, now_ms) / 1000,
	                       period_start_ms(PERIOD_MONTH, now_ms) / 1000);
#undef TAGBUDGETS_LIST_SQL
}

int tagbudgets_delete(struct ctl *ctl, const struct ctl_args *a)
{
	const char *tag = a->operand;
	int status = args_check_tag(ctl->cmd, tag), changed;

	if (status != CTL_OK)
		return status;
	status = CTL_FAIL;
	if (ctl_db_open(ctl) != CTL_OK || ctl_begin(ctl) != CTL_OK)
		goto out;
	changed = ctl_exec(ctl, "DELETE FROM tag_budgets WHERE tag = ?1", "t", tag);
	if (changed == 0)
		ctl_error("tag '%s' has no budget (see 'tallyctl tag list')", tag);
	if (changed <= 0 || ctl_commit(ctl) != CTL_OK)
		goto out;
	printf("deleted budget of tag %s\n", tag);
	status = CTL_OK;
out:
	if (status != CTL_OK)
		ctl_rollback(ctl);
	return status;
}
