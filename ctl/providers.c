/* providers: provider set and provider list. tallyctl is single-threaded. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "providers.h"

int providers_set(struct ctl *ctl, const struct ctl_args *a)
{
	const char *name = a->operand, *api = a->val[OPT_API];
	const char *backend = a->val[OPT_BACKEND], *url = a->val[OPT_URL];
	static const char *const apis[] = { "openai", "anthropic" };
	int status = CTL_FAIL, existed;
	size_t which;

	if (!args_valid_name(name))
		return ctl_usage(ctl->cmd, "invalid provider name '%s': use 1-%d characters from "
		                 "A-Z a-z 0-9 . _ -", name, CTL_NAME_MAX);
	if (args_parse_word(ctl->cmd, OPT_API, api, apis, 2, &which) != CTL_OK)
		return CTL_USAGE;
	if (!args_valid_backend(backend))
		return ctl_usage(ctl->cmd, "invalid backend name '%s': use 1-%d characters from "
		                 "A-Z a-z 0-9 . _ - :", backend, CTL_MODEL_MAX);
	if (url && *url && !args_valid_url(url))
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

int providers_list(struct ctl *ctl, const struct ctl_args *a)
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
	return ctl_print_table(ctl, CTL_SQL(PROVIDER_LIST_SQL), cols,
	                       (int)(sizeof(cols) / sizeof(cols[0])), ctl_list_printer(a), "");
#undef PROVIDER_LIST_SQL
}
