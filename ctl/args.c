/* args: parses and checks what the operator typed: options, operands, names, URLs,
 * integers, dollars, one word of a fixed set (yes or no, a key's policies) and tags.
 * tallyctl is single-threaded. */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "tags.h"

#define CTL_URL_MAX      2048
#define CTL_BUDGET_USD_MAX 1000000000LL    /* whole dollars; 10^15 micros fits int64 */
#define CTL_USD_DECIMALS 6                 /* budgets are exact integer micro-dollars */

/* ---- validation ---- */

/* 1 if s is 1..max characters, each alphanumeric or in extra. */
static int args_valid_chars(const char *s, size_t max, const char *extra)
{
	size_t n = strlen(s), i;

	if (n == 0 || n > max)
		return 0;
	for (i = 0; i < n; i++) {
		char c = s[i];

		if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
		      strchr(extra, c)))
			return 0;
	}
	return 1;
}

int args_valid_name(const char *s)
{
	return args_valid_chars(s, CTL_NAME_MAX, "._-");
}

/* Model names as providers spell them: "gpt-4o", "meta-llama/Llama-3.1-8B",
 * "llama3.1:8b". No comma, which separates --models. */
int args_valid_model(const char *s)
{
	return args_valid_chars(s, CTL_MODEL_MAX, "._-:/@+");
}

/* HAProxy's own rule for proxy names. */
int args_valid_backend(const char *s)
{
	return args_valid_chars(s, CTL_MODEL_MAX, "._-:");
}

int args_valid_url(const char *s)
{
	size_t n = strlen(s), i;

	if (n > CTL_URL_MAX || (strncmp(s, "http://", 7) != 0 && strncmp(s, "https://", 8) != 0))
		return 0;
	for (i = 0; i < n; i++) {
		if (s[i] <= ' ' || s[i] == 0x7f)
			return 0;
	}
	return 1;
}

/* A usage error unless name is valid for a key or a team (what: "key", "team"). */
int args_check_name(const struct ctl_command *cmd, const char *what, const char *name)
{
	if (args_valid_name(name))
		return CTL_OK;
	return ctl_usage(cmd, "invalid %s name '%s': use 1-%d characters from A-Z a-z 0-9 . _ -",
	                 what, name, CTL_NAME_MAX);
}

/* A usage error unless a holds an option: a set command given nothing to change. */
int args_need_option(const struct ctl_command *cmd, const struct ctl_args *a)
{
	int id;

	for (id = 0; id < OPT_COUNT; id++) {
		if (a->val[id])
			return CTL_OK;
	}
	return ctl_usage(cmd, "nothing to change: give at least one option");
}

/* Reads the leading decimal digits of s into *v, stopping once *v exceeds max so that
 * it cannot overflow (max <= INT64_MAX / 10 - 9). Returns the number of digits read. */
size_t args_scan_digits(const char *s, int64_t max, int64_t *v)
{
	size_t i;

	*v = 0;
	for (i = 0; s[i] >= '0' && s[i] <= '9' && *v <= max; i++)
		*v = *v * 10 + (s[i] - '0');
	return i;
}

/* Parses an integer option value: decimal digits only, min..max. hint ends the error
 * message. */
int args_parse_int(const struct ctl_command *cmd, enum ctl_opt_id id, const char *s,
                   int64_t min, int64_t max, const char *hint, int64_t *out)
{
	int64_t v;
	size_t n = args_scan_digits(s, max, &v);

	if (n == 0 || s[n] || v < min || v > max)
		return ctl_usage(cmd, "invalid value '%s' for --%s: expected an integer from %lld to "
		                 "%lld%s", s, ctl_opts[id].name, (long long)min, (long long)max, hint);
	*out = v;
	return CTL_OK;
}

/* Parses dollars ("12", "12.5", "0.000001") into exact micro-dollars: digits, then
 * optionally '.' and 1-6 digits. No floating point, so every accepted value is exact. */
int args_parse_usd(const struct ctl_command *cmd, enum ctl_opt_id id, const char *s,
                   int64_t *out)
{
	int64_t whole, frac = 0;
	size_t n = args_scan_digits(s, CTL_BUDGET_USD_MAX, &whole), nfrac = 0;

	if (n > 0 && s[n] == '.') {
		nfrac = args_scan_digits(s + n + 1, CTL_MICROS_PER_USD - 1, &frac);
		n += 1 + nfrac;
	}
	for (; n > 0 && nfrac < CTL_USD_DECIMALS; nfrac++)
		frac *= 10;
	/* A budget of 0 would refuse every request: revoking the key says that plainly. */
	if (n == 0 || s[n] || whole > CTL_BUDGET_USD_MAX || s[n - 1] == '.' ||
	    nfrac > CTL_USD_DECIMALS || (whole == CTL_BUDGET_USD_MAX && frac > 0) ||
	    whole * CTL_MICROS_PER_USD + frac == 0)
		return ctl_usage(cmd, "invalid value '%s' for --%s: expected dollars from 0.000001 to "
		                 "%lld with at most %d decimals (e.g. 12.50), or none for no budget", s,
		                 ctl_opts[id].name, CTL_BUDGET_USD_MAX, CTL_USD_DECIMALS);
	*out = whole * CTL_MICROS_PER_USD + frac;
	return CTL_OK;
}

/* The index in words[0..n) of s, the value of option id, into *index: one of a fixed
 * set of words, as spelt there. Else a usage error naming them all ("a, b or c"). */
int args_parse_word(const struct ctl_command *cmd, enum ctl_opt_id id, const char *s,
                    const char *const *words, size_t n, size_t *index)
{
	char expected[256];
	size_t i, len = 0;

	for (i = 0; i < n; i++) {
		if (strcmp(s, words[i]) == 0) {
			*index = i;
			return CTL_OK;
		}
	}
	expected[0] = '\0';
	for (i = 0; i < n && len < sizeof(expected); i++)
		len += (size_t)snprintf(expected + len, sizeof(expected) - len, "%s%s",
		                        i == 0 ? "" : i + 1 == n ? " or " : ", ", words[i]);
	return ctl_usage(cmd, "invalid value '%s' for --%s: expected %s", s, ctl_opts[id].name,
	                 expected);
}

/* A switch a row stores as 0 or 1: yes into 1, no into 0. */
int args_parse_yes_no(const struct ctl_command *cmd, enum ctl_opt_id id, const char *s,
                      int64_t *out)
{
	static const char *const yes_no[] = { "yes", "no" };
	size_t i;

	if (args_parse_word(cmd, id, s, yes_no, 2, &i) != CTL_OK)
		return CTL_USAGE;
	*out = i == 0;
	return CTL_OK;
}

/* A set of tags, the value of option id (common/tags.h: spaces after commas, any
 * order), into out (TAGS_TEXT_MAX bytes) as its canonical text: what is stored, never
 * the input as typed. "" is no tags. */
int args_parse_tags(const struct ctl_command *cmd, enum ctl_opt_id id, const char *s, char *out)
{
	struct tags t;
	enum tags_status st = tags_parse(s, strlen(s), &t);

	if (st != TAGS_OK)
		return ctl_usage(cmd, "invalid value '%s' for --%s: %s", s, ctl_opts[id].name,
		                 tags_status_text(st));
	tags_format(&t, out, TAGS_TEXT_MAX);
	return CTL_OK;
}

/* A usage error unless s is one tag, name=value, as tag budgets name it. */
int args_check_tag(const struct ctl_command *cmd, const char *s)
{
	struct tags t;
	enum tags_status st = tags_parse(s, strlen(s), &t);

	if (st != TAGS_OK)
		return ctl_usage(cmd, "invalid tag '%s': %s", s, tags_status_text(st));
	if (!tags_tag_ok(s, strlen(s)))
		return ctl_usage(cmd, "invalid tag '%s': expected one tag, name=value, without spaces", s);
	return CTL_OK;
}

/* ---- command line ---- */

static void args_help_command(const struct ctl_command *cmd)
{
	printf("usage: tallyctl [OPTIONS] %s\n\n%s", cmd->synopsis, cmd->help);
}

static int args_opt_find(const char *name, size_t len)
{
	int id;

	for (id = 0; id < OPT_COUNT; id++) {
		if (strlen(ctl_opts[id].name) == len && strncmp(ctl_opts[id].name, name, len) == 0)
			return id;
	}
	return -1;
}

/* Parses the arguments after "GROUP VERB". Returns CTL_OK, CTL_HELP (help printed) or
 * CTL_USAGE (message printed). */
int args_parse(const struct ctl_command *cmd, int argc, char **argv, struct ctl_args *a)
{
	int i, id, operands_only = 0;

	for (i = 0; i < argc; i++) {
		const char *arg = argv[i], *name, *eq;
		size_t len;

		if (operands_only || arg[0] != '-' || arg[1] == '\0') {
			if (!cmd->operand || a->operand)
				return ctl_usage(cmd, "unexpected argument '%s'", arg);
			a->operand = arg;
			continue;
		}
		if (strcmp(arg, "--") == 0) {
			operands_only = 1;
			continue;
		}
		if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
			args_help_command(cmd);
			return CTL_HELP;
		}
		name = arg + 2;
		eq = strchr(name, '=');
		len = eq ? (size_t)(eq - name) : strlen(name);
		id = arg[1] == '-' ? args_opt_find(name, len) : -1;
		if (id < 0 || !(cmd->allowed & OPT(id)))
			return ctl_usage(cmd, "unknown option '%.*s'", (int)(name - arg + (long)len), arg);
		if (a->val[id])
			return ctl_usage(cmd, "option --%s given twice", ctl_opts[id].name);
		if (!ctl_opts[id].metavar) {
			if (eq)
				return ctl_usage(cmd, "option --%s takes no value", ctl_opts[id].name);
			a->val[id] = arg;
		} else if (eq) {
			a->val[id] = eq + 1;
		} else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) {
			a->val[id] = argv[++i];
		} else {
			return ctl_usage(cmd, "option --%s needs a value (%s)", ctl_opts[id].name,
			                 ctl_opts[id].metavar);
		}
	}
	/* An option standing in for the operand (key create --name): one of the two. */
	for (id = 0; id < OPT_COUNT; id++) {
		if (!(cmd->operand_alt & OPT(id)) || !a->val[id])
			continue;
		if (a->operand)
			return ctl_usage(cmd, "give %s either as an argument or with --%s, not both",
			                 cmd->operand, ctl_opts[id].name);
		a->operand = a->val[id];
	}
	if (cmd->operand && !a->operand && cmd->operand[0] != '[')
		return ctl_usage(cmd, "missing %s", cmd->operand);
	for (id = 0; id < OPT_COUNT; id++) {
		if ((cmd->required & OPT(id)) && !a->val[id])
			return ctl_usage(cmd, "missing required option --%s %s", ctl_opts[id].name,
			                 ctl_opts[id].metavar);
	}
	return CTL_OK;
}

/* Matches argv[*i] against the global option "--name VALUE" or "--name=VALUE".
 * Returns 1 (consumed, *i advanced past a separate value), 0 (not this option) or
 * CTL_USAGE. */
int args_global_opt(const char *name, int argc, char **argv, int *i, const char **out)
{
	const char *arg = argv[*i];
	size_t len = strlen(name);

	if (strncmp(arg, "--", 2) != 0 || strncmp(arg + 2, name, len) != 0 ||
	    (arg[2 + len] != '\0' && arg[2 + len] != '='))
		return 0;
	if (arg[2 + len] == '=')
		*out = arg + 3 + len;
	else if (*i + 1 < argc)
		*out = argv[++*i];
	else
		return ctl_usage(NULL, "option --%s needs a value (PATH)", name);
	if (**out == '\0')
		return ctl_usage(NULL, "option --%s needs a non-empty value", name);
	return 1;
}
