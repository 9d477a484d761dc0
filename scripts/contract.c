/* contract: prints what HAProxy's side of the contract must hold, from the agent's
 * tables, for tests/test_contract.py to compare with haproxy/:
 *   contract log-format  the log-format of a "tally5" record (record.h)
 *   contract vars        each txn.tally variable: name, writers, readers (txnvar.h)
 *   contract members     each json_query of a unary answer: variable, path, dialects
 *                        (usage.h) */
#include <stdio.h>
#include <string.h>

#include "record.h"
#include "txnvar.h"
#include "usage.h"

struct contract_field {
	const char *printed;
	const char *var;
	int flags;
};

static const struct contract_field contract_fields[] = {
#define CONTRACT_FIELD(name, printed, var, flags) { printed, var, flags },
	RECORD_FIELD_TABLE(CONTRACT_FIELD)
#undef CONTRACT_FIELD
};

/* The MAC: HMAC-SHA256 with HAProxy's secret of "tally5", the termination flag and
 * each MAC'd variable after a \x01 (record.c checks it field by field). */
static void contract_mac(void)
{
	size_t i;

	printf("%%[str(tally5),concat(,proc.tally_term)");
	for (i = 0; i < sizeof(contract_fields) / sizeof(contract_fields[0]); i++)
		if (contract_fields[i].flags & RECORD_MACD)
			printf(",concat(\\x01,%s)", contract_fields[i].var);
	printf(",hmac(sha256,proc.tally_secret),base64]");
}

static void contract_log_format(void)
{
	size_t i;

	for (i = 0; i < sizeof(contract_fields) / sizeof(contract_fields[0]); i++) {
		const struct contract_field *f = &contract_fields[i];

		if (i)
			putchar(' ');
		if (f->printed)
			fputs(f->printed, stdout);
		else if (f->var)
			printf("%%[var(%s)%s]", f->var, f->flags & RECORD_URLENC ? ",url_enc" : "");
		else
			contract_mac();
	}
	putchar('\n');
}

/* Who, as a comma-separated list of txnvar.h's parties ("-" for none). */
static void contract_parties(int who)
{
	static const struct {
		int bit;
		const char *name;
	} parties[] = {
		{ TXNVAR_AGENT, "agent" }, { TXNVAR_CFG, "cfg" }, { TXNVAR_LUA, "lua" },
		{ TXNVAR_SPOE, "spoe" }, { TXNVAR_OPERATOR, "operator" },
	};
	const char *sep = "";
	size_t i;

	for (i = 0; i < sizeof(parties) / sizeof(parties[0]); i++)
		if (who & parties[i].bit) {
			printf("%s%s", sep, parties[i].name);
			sep = ",";
		}
	if (!*sep)
		putchar('-');
}

static void contract_vars(void)
{
#define CONTRACT_VAR(id, name, writers, readers, what) \
	printf("%s ", name); contract_parties(writers); putchar(' '); \
	contract_parties(readers); putchar('\n');
	TXNVAR_TABLE(CONTRACT_VAR)
#undef CONTRACT_VAR
}

static const char *const contract_var_names[TXNVAR_COUNT] = {
#define CONTRACT_VAR_NAME(id, name, writers, readers, what) name,
	TXNVAR_TABLE(CONTRACT_VAR_NAME)
#undef CONTRACT_VAR_NAME
};

struct contract_member {
	int dialects, in_usage;
	const char *parent, *name;
	enum txnvar var;
};

static const struct contract_member contract_members_table[] = {
#define CONTRACT_MEMBER(id, dialects, in_usage, parent, name, var) \
	{ dialects, in_usage, parent, name, TXNVAR_##var },
	USAGE_MEMBER_TABLE(CONTRACT_MEMBER)
#undef CONTRACT_MEMBER
};

/* One line a member: "VAR $.PATH DIALECT[,DIALECT...]". */
static void contract_members(void)
{
	static const struct {
		int bit;
		const char *name;
	} dialects[] = {
		{ USAGE_CHAT, "chat" }, { USAGE_RESPONSES, "responses" }, { USAGE_MESSAGES, "messages" },
	};
	size_t i, d;

	for (i = 0; i < sizeof(contract_members_table) / sizeof(contract_members_table[0]); i++) {
		const struct contract_member *m = &contract_members_table[i];
		const char *sep = " ";

		printf("%s $.%s%s%s%s", contract_var_names[m->var], m->in_usage ? "usage." : "",
		       m->parent ? m->parent : "", m->parent ? "." : "", m->name);
		for (d = 0; d < sizeof(dialects) / sizeof(dialects[0]); d++)
			if (m->dialects & dialects[d].bit) {
				printf("%s%s", sep, dialects[d].name);
				sep = ",";
			}
		putchar('\n');
	}
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "log-format") == 0)
		contract_log_format();
	else if (argc == 2 && strcmp(argv[1], "vars") == 0)
		contract_vars();
	else if (argc == 2 && strcmp(argv[1], "members") == 0)
		contract_members();
	else {
		fprintf(stderr, "usage: contract log-format|vars|members\n");
		return 2;
	}
	return 0;
}
