/* teams: teams of keys (create, set, list, delete). A team carries a key's limits and
 * an allow-list (limits.c) that the agent applies to each of its keys on top of the
 * key's own, tags every request of its keys carries, and whether its keys may read
 * the team's usage (GET /tally/v1/usage). tallyctl is single-threaded. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "limits.h"
#include "tags.h"
#include "teams.h"

static const struct limits_sql teams_limits_sql = LIMITS_SQL("teams", "team_models", "team_id");

#define TEAMS_EXISTS_SQL "SELECT 1 FROM teams WHERE name = ?1"
#define TEAMS_SEE_SQL "UPDATE teams SET members_see_usage = ?2 WHERE id = ?1"
#define TEAMS_TAGS_SQL "UPDATE teams SET tags = ?2 WHERE id = ?1"

/* The active keys of a team that both fix tags, with the team's: by key (K "id") or
 * by team (K "team_id"). On PostgreSQL the team's row is locked as team set's write
 * locks it (NO KEY: a key's foreign key to it holds KEY SHARE), so a key set and a
 * team set that both check wait for each other and the second sees the first. */
#define TEAMS_KEY_TAGS_SQL(K, LOCK)                                                    \
	"SELECT k.name, t.name, k.tags, t.tags FROM keys k JOIN teams t ON t.id = k.team_id" \
	" WHERE k." K " = ?1 AND k.revoked_at IS NULL AND k.tags IS NOT NULL"               \
	" AND t.tags IS NOT NULL ORDER BY k.id" LOCK
#define TEAMS_KEY_TAGS(K)                                                               \
	((struct ctl_sql){ TEAMS_KEY_TAGS_SQL(K, ""),                                   \
	                   TEAMS_KEY_TAGS_SQL(K, " FOR NO KEY UPDATE OF t") })

/* The id of the team named name into *id; an unknown name is an error. */
int teams_id(struct ctl *ctl, const char *name, int64_t *id)
{
	int found = ctl_find(ctl, id, "SELECT id FROM teams WHERE name = ?1", "t", name);

	if (found == 0)
		return ctl_error("no team named '%s' (see 'tallyctl team list')", name);
	return found == 1 ? CTL_OK : CTL_FAIL;
}

/* teams_check_key_tags (teams.h) over the rows of st, a TEAMS_KEY_TAGS; finalizes st. */
static int teams_tags_fit(struct ctl *ctl, struct db_stmt *st)
{
	const char *name[2], *text[2];
	struct tags t[2], u;
	enum tags_status ts;
	enum db_status rc = DB_DONE;
	int i, status = CTL_OK;

	while (status == CTL_OK && (rc = db_step(st)) == DB_ROW) {
		for (i = 0; i < 2 && status == CTL_OK; i++) {
			name[i] = db_col_text(st, i);
			text[i] = db_col_text(st, 2 + i);
			ts = tags_parse(text[i], strlen(text[i]), &t[i]);
			if (ts != TAGS_OK)
				status = ctl_error("%s '%s': its stored tags '%s' are invalid: %s",
				                   i ? "team" : "key", name[i], text[i], tags_status_text(ts));
		}
		if (status == CTL_OK && tags_union(&u, &t[0], &t[1]) == TAGS_TOO_MANY)
			status = ctl_error("key '%s' and its team '%s' would fix more than %d tags together:"
			                   " every request of the key would be refused", name[0], name[1],
			                   TAGS_MAX);
	}
	if (status == CTL_OK && rc != DB_DONE)
		status = ctl_db_error(ctl);
	db_finalize(st);
	return status;
}

int teams_check_key_tags(struct ctl *ctl, int64_t key_id)
{
	struct db_stmt *st = ctl_prepare(ctl, ctl_sql_of(ctl, TEAMS_KEY_TAGS("id")), "i", key_id);

	return st ? teams_tags_fit(ctl, st) : CTL_FAIL;
}

/* teams_check_key_tags for each key of team id. */
static int teams_check_tags(struct ctl *ctl, int64_t id)
{
	struct db_stmt *st = ctl_prepare(ctl, ctl_sql_of(ctl, TEAMS_KEY_TAGS("team_id")), "i", id);

	return st ? teams_tags_fit(ctl, st) : CTL_FAIL;
}

/* A usage error unless name may be a new team's. */
static int teams_check_name(const struct ctl_command *cmd, const char *name)
{
	int status = args_check_name(cmd, "team", name);

	/* --team none takes a key out of its team: no team can be called that. */
	if (status == CTL_OK && strcmp(name, "none") == 0)
		status = ctl_usage(cmd, "invalid team name 'none': '--team none' means no team");
	return status;
}

/* Inserts the team row inside the caller's transaction, its id into *id. */
static int teams_insert(struct ctl *ctl, const char *name, int64_t *id)
{
	if (ctl_name_free(ctl, "team", TEAMS_EXISTS_SQL, name) != CTL_OK)
		return CTL_FAIL;
	return ctl_insert_named(ctl, ctl_prepare(ctl, "INSERT INTO teams (name, created_at)"
	                                         " VALUES (?1, ?2) RETURNING id", "ti", name,
	                                         db_now()),
	                        "team", TEAMS_EXISTS_SQL, name, id);
}

/* Ends a command's transaction: commits it and says what was done if ok, else rolls
 * it back (what failed is reported already). */
static int teams_end(struct ctl *ctl, int ok, const char *done, const char *name)
{
	if (ok && ctl_commit(ctl) == CTL_OK) {
		printf("%s team %s\n", done, name);
		return CTL_OK;
	}
	ctl_rollback(ctl);
	return CTL_FAIL;
}

/* team create (create: 1) and team set, which differ only in where the row comes
 * from. set changes only the options given; the team keeps its id, so its keys and
 * the history of its rows and rollups stay its own. A new team's keys see their own
 * usage alone until --members-see-usage yes. */
static int teams_write(struct ctl *ctl, const struct ctl_args *a, int create)
{
	const char *name = a->operand, *see_arg = a->val[OPT_MEMBERS_SEE_USAGE];
	const char *tags_arg = a->val[OPT_TAGS];
	char tags[TAGS_TEXT_MAX];
	struct limits l = { 0 };
	int64_t id, see = 0;
	int status;

	status = create ? teams_check_name(ctl->cmd, name) : args_need_option(ctl->cmd, a);
	if (status == CTL_OK)
		status = limits_parse(ctl->cmd, a, &l);
	if (status == CTL_OK && see_arg)
		status = args_parse_yes_no(ctl->cmd, OPT_MEMBERS_SEE_USAGE, see_arg, &see);
	if (status == CTL_OK && tags_arg)
		status = args_parse_tags(ctl->cmd, OPT_TAGS, tags_arg, tags);
	if (status == CTL_OK)
		status = teams_end(ctl, ctl_db_open(ctl) == CTL_OK && ctl_begin(ctl) == CTL_OK &&
		                   (create ? teams_insert(ctl, name, &id) :
		                    teams_id(ctl, name, &id)) == CTL_OK &&
		                   limits_models_exist(ctl, &l) == CTL_OK &&
		                   limits_write(ctl, &teams_limits_sql, id, &l) == CTL_OK &&
		                   (!see_arg || ctl_exec(ctl, TEAMS_SEE_SQL, "ii", id, see) >= 0) &&
		                   (!tags_arg || (ctl_exec(ctl, TEAMS_TAGS_SQL, "it", id,
		                                           tags[0] ? tags : NULL) >= 0 &&
		                                  teams_check_tags(ctl, id) == CTL_OK)),
		                   create ? "created" : "updated", name);
	limits_free(&l);
	return status;
}

int teams_create(struct ctl *ctl, const struct ctl_args *a)
{
	return teams_write(ctl, a, 1);
}

int teams_set(struct ctl *ctl, const struct ctl_args *a)
{
	return teams_write(ctl, a, 0);
}

int teams_list(struct ctl *ctl, const struct ctl_args *a)
{
	static const struct ctl_col cols[] = {
		{ "ID", "id", COL_INT },
		{ "NAME", "name", COL_TEXT },
		{ "CREATED", "created_at", COL_TIME },
		{ "ACTIVE_KEYS", "active_keys", COL_INT },
		{ "MODELS", "models", COL_LIST },
		LIMITS_COLS,
		{ "MEMBERS_SEE_USAGE", "members_see_usage", COL_BOOL },
		{ "TAGS", "tags", COL_CSV },
	};

#define TEAM_LIST_SQL(MODELS)                                                           \
	"SELECT t.id, t.name, t.created_at,"                                            \
	" (SELECT count(*) FROM keys WHERE team_id = t.id AND revoked_at IS NULL), "    \
	MODELS ", t.rpm, t.tpm, t.max_concurrent, t.budget_micros, t.budget_period,"      \
	" t.budget_tz,"                                                                   \
	" t.members_see_usage, t.tags FROM teams t ORDER BY t.id"
	static const struct ctl_sql q = LIMITS_LIST_SQL(TEAM_LIST_SQL, "team_models", "team_id", "t.id");
#undef TEAM_LIST_SQL

	return ctl_print_table(ctl, q, cols, (int)(sizeof(cols) / sizeof(cols[0])),
	                       ctl_list_printer(a), "");
}

/* Fails, saying how many, while keys (revoked ones too) belong to team id: the agent
 * would find their team gone. */
static int teams_check_empty(struct ctl *ctl, const char *name, int64_t id)
{
	int64_t n = 0;

	if (ctl_find(ctl, &n, "SELECT count(*) FROM keys WHERE team_id = ?1", "i", id) != 1)
		return CTL_FAIL;
	if (n == 0)
		return CTL_OK;
	return ctl_error("cannot delete team '%s': %lld key%s still belong%s to it (revoked ones "
	                 "included); move %s first: tallyctl key set KEY --team OTHER|none", name,
	                 (long long)n, n == 1 ? "" : "s", n == 1 ? "s" : "", n == 1 ? "it" : "them");
}

/* Deletes the row of team id (its allow-list goes with it) inside the caller's
 * transaction. On PostgreSQL a key set --team may move a key into the team after the
 * check: the foreign key then refuses the delete, reported as the check would. */
static int teams_delete_row(struct ctl *ctl, const char *name, int64_t id)
{
	struct db_stmt *st = ctl_prepare(ctl, "DELETE FROM teams WHERE id = ?1", "i", id);
	enum db_status rc;
	char err[512];

	if (!st)
		return CTL_FAIL;
	rc = db_step(st);
	snprintf(err, sizeof(err), "%s", rc == DB_DONE ? "" : db_errmsg(ctl->db));
	db_finalize(st);
	if (rc == DB_DONE)
		return CTL_OK;
	if (rc == DB_CONSTRAINT) {
		ctl_rollback(ctl);
		if (teams_check_empty(ctl, name, id) != CTL_OK)
			return CTL_FAIL;
	}
	return ctl_error("database error: %s", err);
}

/* Usage rows and rollups keep the deleted team's id. */
int teams_delete(struct ctl *ctl, const struct ctl_args *a)
{
	const char *name = a->operand;
	int64_t id;

	return teams_end(ctl, ctl_db_open(ctl) == CTL_OK && ctl_begin(ctl) == CTL_OK &&
	                 teams_id(ctl, name, &id) == CTL_OK &&
	                 teams_check_empty(ctl, name, id) == CTL_OK &&
	                 teams_delete_row(ctl, name, id) == CTL_OK, "deleted", name);
}
