/* limits: what a key and a team both carry: rpm, tpm, max_concurrent, a budget per
 * period and an allow-list of models. One parser of their options (pure) and one
 * writer of a row's. tallyctl is single-threaded. */
#ifndef TALLY_LIMITS_H
#define TALLY_LIMITS_H

#include <stddef.h>
#include <stdint.h>

#include "ctl.h"

#define LIMITS_N 4   /* --rpm, --tpm, --max-concurrent, --budget-usd */
#define LIMITS_BUDGET 3   /* the index of --budget-usd */

#define LIMIT_OPTS (OPT(OPT_RPM) | OPT(OPT_TPM) | OPT(OPT_MAX_CONCURRENT) | \
                    OPT(OPT_BUDGET_USD) | OPT(OPT_BUDGET_PERIOD) | OPT(OPT_BUDGET_TZ))

/* The limit and allow-list options, validated. */
struct limits {
	char *csv;                        /* owned copy of --models, split in place */
	char **models;                    /* owned, into csv */
	size_t nmodels;
	int models_given;                 /* --models given: the list is replaced; with no
	                                   * model ('' or none) lifted: every model */
	const char *period;               /* --budget-period; NULL: unchanged */
	int tz_given;                     /* --budget-tz given */
	const char *tz;                   /* its zone (tz.h), NULL for UTC */
	int64_t given[LIMITS_N];          /* 1 if the i-th limit option was given */
	int64_t value[LIMITS_N];
	const int64_t *bound[LIMITS_N];   /* &value[i], or NULL for "none" */
};

/* Where a row's limits are stored: its table, and the table of its allow-list. */
struct limits_sql {
	const char *update;   /* ?1 the row's id, ?2..?9 given and value of each limit,
	                       * ?10 the period (NULL: unchanged), ?11 and ?12 given
	                       * and value of the zone */
	const char *clear;    /* ?1 the row's id */
	const char *add;      /* ?1 the row's id, ?2 a model */
};

#define LIMITS_SQL(table, models, owner)                                                 \
	{ "UPDATE " table " SET"                                                         \
	  " rpm = CASE WHEN ?2 <> 0 THEN ?3 ELSE rpm END,"                               \
	  " tpm = CASE WHEN ?4 <> 0 THEN ?5 ELSE tpm END,"                               \
	  " max_concurrent = CASE WHEN ?6 <> 0 THEN ?7 ELSE max_concurrent END,"         \
	  " budget_micros = CASE WHEN ?8 <> 0 THEN ?9 ELSE budget_micros END,"           \
	  " budget_period = coalesce(?10, budget_period),"                               \
	  " budget_tz = CASE WHEN ?11 <> 0 THEN ?12 ELSE budget_tz END"                  \
	  " WHERE id = ?1",                                                             \
	  "DELETE FROM " models " WHERE " owner " = ?1",                                 \
	  "INSERT INTO " models " (" owner ", model) VALUES (?1, ?2) ON CONFLICT DO NOTHING" }

/* A row's allow-list as one text, comma-joined in byte order, NULL when empty: SQLite
 * has no string_agg before 3.44, nor PostgreSQL group_concat. LIMITS_LIST_SQL is the
 * struct ctl_sql of a list query, LIST(MODELS), showing it. */
#define LIMITS_LIST_SQL(LIST, models, owner, id)                                         \
	{ LIST(LIMITS_MODELS_SQLITE(models, owner, id)), LIST(LIMITS_MODELS_PG(models, owner, id)) }
#define LIMITS_MODELS_SQLITE(models, owner, id)                                          \
	"(SELECT group_concat(model, ',') FROM"                                          \
	" (SELECT model FROM " models " WHERE " owner " = " id " ORDER BY model))"
#define LIMITS_MODELS_PG(models, owner, id)                                              \
	"(SELECT string_agg(model, ',' ORDER BY model COLLATE \"C\")"                    \
	" FROM " models " WHERE " owner " = " id ")"

/* The list columns of the limits, in the order of their SELECT: rpm, tpm,
 * max_concurrent, budget_micros, budget_period, budget_tz. */
#define LIMITS_COLS                                                                      \
	{ "RPM", "rpm", COL_INT },                                                       \
	{ "TPM", "tpm", COL_INT },                                                       \
	{ "MAX_CONC", "max_concurrent", COL_INT },                                       \
	{ "BUDGET_USD", "budget_micros", COL_USD },                                      \
	{ "PERIOD", "budget_period", COL_TEXT },                                         \
	{ "TIME_ZONE", "budget_tz", COL_TEXT }

int limits_parse(const struct ctl_command *cmd, const struct ctl_args *a, struct limits *l);
int limits_has_model(const struct limits *l, const char *model);
void limits_free(struct limits *l);
int limits_models_exist(struct ctl *ctl, const struct limits *l);
int limits_write(struct ctl *ctl, const struct limits_sql *q, int64_t id, const struct limits *l);

#endif
