/* endusers: end users' limits (enduser set, list, delete; docs/limits.md, "End users"):
 * rpm, tpm and a budget per period for the end users a key's requests name, set on a
 * key or on a team (for each of its keys), for one end user or as the default of every
 * end user without a row of its own. The options and their parser are a key's
 * (limits.c); the id's rule is the agent's (enduser.h). tallyctl is single-threaded. */
#include "endusers.h"

#include <stdio.h>
#include <string.h>

#include "args.h"
#include "enduser.h"
#include "limits.h"

/* One of --key and --team, and the end user (the operand; none: the default). */
static int endusers_check(const struct ctl_command *cmd, const struct ctl_args *a)
{
	const char *user = a->operand;
	int status = ctl_scope_check(cmd, a, "whose end users these are");

	if (status == CTL_OK && user && !enduser_id_ok(user, strlen(user)))
		return ctl_usage(cmd, "an end user's id is 1 to %d bytes of UTF-8 without control"
		                 " characters, as requests name it", ENDUSER_ID_MAX - 1);
	return status;
}

/* What the end user and its owner are called in messages. */
static void endusers_who(const struct ctl_args *a, char *buf, size_t cap)
{
	ctl_scope_who(a, a->operand ? a->operand : "every end user", buf, cap);
}

/* Writes the row inside the caller's transaction: given options change, others keep
 * their value (a new row: no limit, the month). */
static int endusers_write(struct ctl *ctl, const char *col, int64_t id, const char *user,
                          const struct limits *l)
{
	char sql[512];
	int changed;

	snprintf(sql, sizeof(sql), "UPDATE end_user_limits SET"
	         " rpm = CASE WHEN ?3 <> 0 THEN ?4 ELSE rpm END,"
	         " tpm = CASE WHEN ?5 <> 0 THEN ?6 ELSE tpm END,"
	         " budget_micros = CASE WHEN ?7 <> 0 THEN ?8 ELSE budget_micros END,"
	         " budget_period = coalesce(?9, budget_period)"
	         " WHERE %s = ?1 AND end_user = ?2", col);
	changed = ctl_exec(ctl, sql, "itininint", id, user, l->given[0], l->bound[0], l->given[1],
	                   l->bound[1], l->given[LIMITS_BUDGET], l->bound[LIMITS_BUDGET], l->period);
	if (changed != 0)
		return changed > 0 ? CTL_OK : CTL_FAIL;
	/* A new row of a period alone would have no limit: it would exempt the end user. */
	if (!l->given[0] && !l->given[1] && !l->given[LIMITS_BUDGET])
		return ctl_error("%s has no limits of its own yet: give --rpm, --tpm or"
		                 " --budget-usd (none exempts it from the defaults)",
		                 user[0] ? user : "the default");
	snprintf(sql, sizeof(sql), "INSERT INTO end_user_limits (%s, end_user, created_at, rpm,"
	         " tpm, budget_micros, budget_period) VALUES (?1, ?2, ?3, ?4, ?5, ?6,"
	         " coalesce(?7, 'month'))", col);
	return ctl_exec(ctl, sql, "itinnnt", id, user, db_now(), l->bound[0], l->bound[1],
	                l->bound[LIMITS_BUDGET], l->period) < 0 ? CTL_FAIL : CTL_OK;
}

int endusers_set(struct ctl *ctl, const struct ctl_args *a)
{
	const char *user = a->operand ? a->operand : "", *col;
	struct limits l = { 0 };
	char who[512];
	int64_t id;
	int status;

	status = endusers_check(ctl->cmd, a);
	if (status == CTL_OK && !a->val[OPT_RPM] && !a->val[OPT_TPM] && !a->val[OPT_BUDGET_USD] &&
	    !a->val[OPT_BUDGET_PERIOD])
		status = ctl_usage(ctl->cmd, "nothing to set: give --rpm, --tpm or --budget-usd"
		                   " (none exempts the end user from a default)");
	if (status == CTL_OK)
		status = limits_parse(ctl->cmd, a, &l);
	if (status == CTL_OK) {
		status = CTL_FAIL;
		if (ctl_db_open(ctl) == CTL_OK && ctl_begin(ctl) == CTL_OK &&
		    ctl_scope_id(ctl, a, &col, &id) == CTL_OK &&
		    endusers_write(ctl, col, id, user, &l) == CTL_OK && ctl_commit(ctl) == CTL_OK) {
			endusers_who(a, who, sizeof(who));
			printf("set limits of %s\n", who);
			status = CTL_OK;
		} else {
			ctl_rollback(ctl);
		}
	}
	limits_free(&l);
	return status;
}

int endusers_list(struct ctl *ctl, const struct ctl_args *a)
{
	static const struct ctl_col cols[] = {
		CTL_SCOPE_COLS,
		{ "END_USER", "end_user", COL_TEXT },
		{ "RPM", "rpm", COL_INT },
		{ "TPM", "tpm", COL_INT },
		{ "BUDGET_USD", "budget_micros", COL_USD },
		{ "PERIOD", "budget_period", COL_TEXT },
		{ "CREATED", "created_at", COL_TIME },
	};

#define ENDUSERS_LIST_SQL(C)                                                            \
	"SELECT k.name, t.name, nullif(l.end_user, ''), l.rpm, l.tpm, l.budget_micros,"   \
	" l.budget_period, l.created_at" CTL_SCOPE_FROM("end_user_limits", C)             \
	", l.end_user" C
	return ctl_scope_list(ctl, a, CTL_SQL(ENDUSERS_LIST_SQL), cols,
	                      (int)(sizeof(cols) / sizeof(cols[0])));
#undef ENDUSERS_LIST_SQL
}

int endusers_delete(struct ctl *ctl, const struct ctl_args *a)
{
	char who[512];
	int status = endusers_check(ctl->cmd, a);

	if (status != CTL_OK)
		return status;
	endusers_who(a, who, sizeof(who));
	return ctl_scope_delete(ctl, a, "end_user_limits", "end_user",
	                        a->operand ? a->operand : "", "limits", who,
	                        "has no limits of its own (see 'tallyctl enduser list')");
}
