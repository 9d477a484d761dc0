/* limits: the limit and allow-list options of keys and teams, parsed once for both, and
 * written to a key's or a team's row. tallyctl is single-threaded. */
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "limits.h"
#include "tz.h"

#define LIMITS_MAX    1000000000000LL   /* rpm, tpm, max_concurrent */

/* The nullable limit columns, by option; the order of LIMITS_SQL. */
static const enum ctl_opt_id limits_opts[] = { OPT_RPM, OPT_TPM, OPT_MAX_CONCURRENT,
                                               [LIMITS_BUDGET] = OPT_BUDGET_USD };
_Static_assert(sizeof(limits_opts) / sizeof(limits_opts[0]) == LIMITS_N,
               "limits.h sizes struct limits by this list");

/* Splits a --models value in place into l->models (pointing into l->csv). Rejects
 * empty and malformed names; '' and none lift the list. */
static int limits_split_models(const struct ctl_command *cmd, struct limits *l)
{
	size_t count = 1, i;
	char *p;

	l->models_given = 1;
	if (*l->csv == '\0' || strcmp(l->csv, "none") == 0)
		return CTL_OK;
	for (p = l->csv; *p; p++)
		count += *p == ',';
	l->models = calloc(count, sizeof(*l->models));
	if (!l->models)
		return ctl_error("out of memory");
	l->nmodels = count;
	for (i = 0, p = l->csv; i < count; i++) {
		char *comma = strchr(p, ',');

		if (comma)
			*comma = '\0';
		if (!args_valid_model(p))
			return ctl_usage(cmd, "invalid model name '%s' in --models", p);
		l->models[i] = p;
		p = comma ? comma + 1 : p;
	}
	return CTL_OK;
}

int limits_has_model(const struct limits *l, const char *model)
{
	size_t i;

	for (i = 0; i < l->nmodels; i++) {
		if (strcmp(l->models[i], model) == 0)
			return 1;
	}
	return 0;
}

void limits_free(struct limits *l)
{
	free(l->models);
	free(l->csv);
}

/* --budget-tz: a zone this machine's tzdata has (the agent reads it the same way), or
 * UTC (stored as NULL, one spelling of it). */
static int limits_parse_tz(const struct ctl_command *cmd, const char *v, struct limits *l)
{
	char err[512];

	if (!v)
		return CTL_OK;
	l->tz_given = 1;
	if (strcmp(v, "UTC") == 0)
		return CTL_OK;
	if (!tz_get(v, err, sizeof(err)))
		return ctl_usage(cmd, "--budget-tz: %s", err);
	l->tz = v;
	return CTL_OK;
}

/* Checks everything that needs no database. The caller frees l even on failure. */
int limits_parse(const struct ctl_command *cmd, const struct ctl_args *a, struct limits *l)
{
	static const char *const periods[] = { "day", "week", "month", "total" };
	size_t i;
	int status;

	if (a->val[OPT_MODELS]) {
		l->csv = strdup(a->val[OPT_MODELS]);
		if (!l->csv)
			return ctl_error("out of memory");
		status = limits_split_models(cmd, l);
		if (status != CTL_OK)
			return status;
	}
	for (i = 0; i < LIMITS_N; i++) {
		enum ctl_opt_id id = limits_opts[i];
		const char *v = a->val[id];

		l->given[i] = v != NULL;
		/* "none" lifts the limit: NULL in the database. */
		if (!v || strcmp(v, "none") == 0)
			continue;
		status = id == OPT_BUDGET_USD ?
			args_parse_usd(cmd, id, v, &l->value[i]) :
			args_parse_int(cmd, id, v, 1, LIMITS_MAX, ", or none for no limit", &l->value[i]);
		if (status != CTL_OK)
			return status;
		l->bound[i] = &l->value[i];
	}
	l->period = a->val[OPT_BUDGET_PERIOD];
	if (l->period && (status = args_parse_word(cmd, OPT_BUDGET_PERIOD, l->period, periods,
	                                           sizeof(periods) / sizeof(periods[0]), &i)) != CTL_OK)
		return status;
	return limits_parse_tz(cmd, a->val[OPT_BUDGET_TZ], l);
}

/* Fails unless every model of the allow-list exists. */
int limits_models_exist(struct ctl *ctl, const struct limits *l)
{
	int64_t id;
	size_t i;

	for (i = 0; i < l->nmodels; i++) {
		if (ctl_model_id(ctl, l->models[i], &id) != CTL_OK)
			return CTL_FAIL;
	}
	return CTL_OK;
}

/* Writes the given options to row id inside the caller's transaction; options not
 * given keep the stored values. */
int limits_write(struct ctl *ctl, const struct limits_sql *q, int64_t id, const struct limits *l)
{
	size_t i;

	if (ctl_exec(ctl, q->update, "iinininintit", id, l->given[0], l->bound[0], l->given[1],
	             l->bound[1], l->given[2], l->bound[2], l->given[3], l->bound[3],
	             l->period, l->tz_given, l->tz) < 0)
		return CTL_FAIL;
	if (!l->models_given)
		return CTL_OK;
	if (ctl_exec(ctl, q->clear, "i", id) < 0)
		return CTL_FAIL;
	for (i = 0; i < l->nmodels; i++) {
		if (ctl_exec(ctl, q->add, "it", id, l->models[i]) < 0)
			return CTL_FAIL;
	}
	return CTL_OK;
}
