/* Unit tests of tallyctl's parsing of operator input: names, URLs, integers, dollars,
 * one word of a fixed set and tags (ctl/args.c), a command's arguments and the global options, the limit options
 * of keys and teams (ctl/limits.c) and the other options of key create and key set
 * (ctl/keys.c). */
#include <string.h>

#include "args.h"
#include "keys.h"
#include "limits.h"
#include "unit.h"

#define NARGS(v) ((int)(sizeof(v) / sizeof((v)[0])))

static const struct ctl_command key_create = {
	.group = "key", .verb = "create", .synopsis = "key create NAME", .help = "help\n",
	.operand = "NAME", .allowed = OPT(OPT_NAME) | OPT(OPT_RPM) | OPT(OPT_JSON),
	.operand_alt = OPT(OPT_NAME),
};

static const struct ctl_command prune = {
	.group = "prune", .synopsis = "prune --older-than-days N", .help = "help\n",
	.allowed = OPT(OPT_OLDER_THAN_DAYS), .required = OPT(OPT_OLDER_THAN_DAYS),
};

static void test_valid_names(void)
{
	char longest[65], url[2050];

	memset(longest, 'a', 64);
	longest[64] = '\0';
	CHECK(args_valid_name("k1.a_b-c"));
	CHECK(args_valid_name(longest));
	CHECK(!args_valid_name(""));
	CHECK(!args_valid_name("a b"));
	CHECK(!args_valid_name("a/b"));
	CHECK_EQ_INT(args_check_name(&key_create, "team", "eng_1.x-y"), CTL_OK);
	CHECK_EQ_INT(args_check_name(&key_create, "team", "a/b"), CTL_USAGE);
	CHECK_EQ_INT(args_check_name(&key_create, "team", ""), CTL_USAGE);
	CHECK(args_valid_model("meta-llama/Llama-3.1-8B"));
	CHECK(args_valid_model("llama3.1:8b"));
	CHECK(args_valid_model("claude@x+y"));
	CHECK(!args_valid_model("m1,m2"));
	CHECK(args_valid_backend("be:openai_1"));
	CHECK(!args_valid_backend("be/1"));
	CHECK(args_valid_url("http://x"));
	CHECK(args_valid_url("https://api.example.com/v1"));
	CHECK(!args_valid_url("ftp://x"));
	CHECK(!args_valid_url("https://a b"));
	CHECK(!args_valid_url("https://a\x7f"));
	memcpy(url, "https://", 8);
	memset(url + 8, 'a', sizeof(url) - 9);
	url[sizeof(url) - 1] = '\0';
	CHECK(!args_valid_url(url));
	url[2048] = '\0';
	CHECK(args_valid_url(url));
}

static void test_parse_int(void)
{
	int64_t v = -1;

	CHECK_EQ_INT(args_scan_digits("123abc", 1000, &v), 3);
	CHECK_EQ_INT(v, 123);
	/* stops once past max: no overflow on a long run of digits */
	CHECK(args_scan_digits("99999999999999999999999", 100, &v) < 23);
	CHECK(v > 100);
	CHECK_EQ_INT(args_parse_int(&prune, OPT_OLDER_THAN_DAYS, "30", 1, 36500, "", &v), CTL_OK);
	CHECK_EQ_INT(v, 30);
	CHECK_EQ_INT(args_parse_int(&prune, OPT_OLDER_THAN_DAYS, "36500", 1, 36500, "", &v), CTL_OK);
	v = 7;
	CHECK_EQ_INT(args_parse_int(&prune, OPT_OLDER_THAN_DAYS, "0", 1, 36500, "", &v), CTL_USAGE);
	CHECK_EQ_INT(args_parse_int(&prune, OPT_OLDER_THAN_DAYS, "36501", 1, 36500, "", &v),
	             CTL_USAGE);
	CHECK_EQ_INT(args_parse_int(&prune, OPT_OLDER_THAN_DAYS, "", 1, 36500, "", &v), CTL_USAGE);
	CHECK_EQ_INT(args_parse_int(&prune, OPT_OLDER_THAN_DAYS, "-1", 0, 36500, "", &v), CTL_USAGE);
	CHECK_EQ_INT(args_parse_int(&prune, OPT_OLDER_THAN_DAYS, "+1", 0, 36500, "", &v), CTL_USAGE);
	CHECK_EQ_INT(args_parse_int(&prune, OPT_OLDER_THAN_DAYS, "1x", 0, 36500, "", &v), CTL_USAGE);
	CHECK_EQ_INT(args_parse_int(&prune, OPT_OLDER_THAN_DAYS, "99999999999999999999999", 0,
	                            36500, "", &v), CTL_USAGE);
	CHECK_EQ_INT(v, 7);
}

static void test_parse_usd(void)
{
	static const struct {
		const char *s;
		int64_t micros;   /* -1: refused */
	} cases[] = {
		{ "12", 12000000 }, { "12.5", 12500000 }, { "12.50", 12500000 },
		{ "0.000001", 1 }, { "1000000000", 1000000000000000LL },
		{ "0", -1 }, { "0.0", -1 }, { "1.", -1 }, { ".5", -1 }, { "1.1234567", -1 },
		{ "1000000000.000001", -1 }, { "1000000001", -1 }, { "1e3", -1 }, { "", -1 },
		{ "-1", -1 }, { "1,5", -1 },
	};
	int64_t v;
	int i;

	for (i = 0; i < NARGS(cases); i++) {
		v = -1;
		CHECK_EQ_INT(args_parse_usd(&key_create, OPT_BUDGET_USD, cases[i].s, &v),
		             cases[i].micros < 0 ? CTL_USAGE : CTL_OK);
		CHECK_EQ_INT(v, cases[i].micros);
	}
}

/* One word of the set, as spelt there, into its index; anything else refused. */
static void test_parse_word(void)
{
	static const char *const words[] = { "optional", "required", "forbidden" };
	static const char *const refused[] = { "", "Required", "FORBIDDEN", "option", "optionalx",
	                                       " required", "none", "inherit" };
	size_t i, w;

	for (i = 0; i < NARGS(words); i++) {
		w = 9;
		CHECK_EQ_INT(args_parse_word(&key_create, OPT_END_USERS, words[i], words, 3, &w),
		             CTL_OK);
		CHECK_EQ_INT(w, i);
	}
	for (i = 0; i < NARGS(refused); i++) {
		w = 9;
		CHECK_EQ_INT(args_parse_word(&key_create, OPT_END_USERS, refused[i], words, 3, &w),
		             CTL_USAGE);
		CHECK_EQ_INT(w, 9);
	}
}

/* yes and no as spelt, nothing else: a typo never turns a team's flag. */
static void test_parse_yes_no(void)
{
	static const char *const refused[] = { "", "Yes", "YES", "y", "1", "true", "on", "no ",
	                                       "yess", "maybe" };
	int64_t v = -1;
	int i;

	CHECK_EQ_INT(args_parse_yes_no(&key_create, OPT_MEMBERS_SEE_USAGE, "yes", &v), CTL_OK);
	CHECK_EQ_INT(v, 1);
	CHECK_EQ_INT(args_parse_yes_no(&key_create, OPT_MEMBERS_SEE_USAGE, "no", &v), CTL_OK);
	CHECK_EQ_INT(v, 0);
	for (i = 0; i < NARGS(refused); i++) {
		v = 7;
		CHECK_EQ_INT(args_parse_yes_no(&key_create, OPT_MEMBERS_SEE_USAGE, refused[i], &v),
		             CTL_USAGE);
		CHECK_EQ_INT(v, 7);
	}
}

/* --tags stores the canonical text whatever the spelling; a tag budget names one tag. */
static void test_parse_tags(void)
{
	static const char *const refused[] = { "A=1", "a=1,,b=2", "a", "a=1,a=2", "a=", "=1",
	                                       "a=1 b=2", "a=\"1\"" };
	static const char *const not_one[] = { "", "a=1,b=2", " a=1", "a=1 ", "a", "A=1",
	                                       "a=1,", "a==1" };
	char out[TAGS_TEXT_MAX];
	int i;

	CHECK_EQ_INT(args_parse_tags(&key_create, OPT_TAGS, " b=2, a=1", out), CTL_OK);
	CHECK_EQ_STR(out, "a=1,b=2");
	CHECK_EQ_INT(args_parse_tags(&key_create, OPT_TAGS, "env=prod,owner=search", out), CTL_OK);
	CHECK_EQ_STR(out, "env=prod,owner=search");
	CHECK_EQ_INT(args_parse_tags(&key_create, OPT_TAGS, "", out), CTL_OK);
	CHECK_EQ_STR(out, "");
	CHECK_EQ_INT(args_parse_tags(&key_create, OPT_TAGS, "a=1,b=2,c=3,d=4,e=5,f=6,g=7,h=8,i=9",
	                             out), CTL_USAGE);
	for (i = 0; i < NARGS(refused); i++)
		CHECK_EQ_INT(args_parse_tags(&key_create, OPT_TAGS, refused[i], out), CTL_USAGE);
	CHECK_EQ_INT(args_check_tag(&key_create, "env=prod"), CTL_OK);
	CHECK_EQ_INT(args_check_tag(&key_create, "url=https://x.example/a@b+c:1"), CTL_OK);
	for (i = 0; i < NARGS(not_one); i++)
		CHECK_EQ_INT(args_check_tag(&key_create, not_one[i]), CTL_USAGE);
}

static void test_parse_args(void)
{
	char *ok[] = { "k1", "--rpm", "5", "--json" };
	char *eq[] = { "--rpm=5", "--", "-x" };
	char *byname[] = { "--name", "k1" };
	char *both[] = { "k1", "--name", "k2" };
	char *unknown[] = { "k1", "--bogus" };
	char *notallowed[] = { "k1", "--tpm", "5" };
	char *novalue[] = { "k1", "--rpm" };
	char *optvalue[] = { "k1", "--rpm", "--json" };
	char *twice[] = { "k1", "--rpm", "5", "--rpm", "6" };
	char *switchval[] = { "k1", "--json=1" };
	char *extra[] = { "k1", "k2" };
	char *dash[] = { "-" };
	char *days[] = { "--older-than-days", "3" };
	struct ctl_args a;

	memset(&a, 0, sizeof(a));
	CHECK_EQ_INT(args_parse(&key_create, NARGS(ok), ok, &a), CTL_OK);
	CHECK_EQ_STR(a.operand, "k1");
	CHECK_EQ_STR(a.val[OPT_RPM], "5");
	CHECK(a.val[OPT_JSON] == ok[3]);
	memset(&a, 0, sizeof(a));
	CHECK_EQ_INT(args_parse(&key_create, NARGS(eq), eq, &a), CTL_OK);
	CHECK_EQ_STR(a.val[OPT_RPM], "5");
	CHECK_EQ_STR(a.operand, "-x");
	memset(&a, 0, sizeof(a));
	CHECK_EQ_INT(args_parse(&key_create, NARGS(byname), byname, &a), CTL_OK);
	CHECK_EQ_STR(a.operand, "k1");
	memset(&a, 0, sizeof(a));
	CHECK_EQ_INT(args_parse(&key_create, NARGS(dash), dash, &a), CTL_OK);
	CHECK_EQ_STR(a.operand, "-");
#define REFUSED(cmd, argv)                                                        \
	do {                                                                      \
		memset(&a, 0, sizeof(a));                                         \
		CHECK_EQ_INT(args_parse(&(cmd), NARGS(argv), argv, &a), CTL_USAGE); \
	} while (0)
	REFUSED(key_create, both);
	REFUSED(key_create, unknown);
	REFUSED(key_create, notallowed);
	REFUSED(key_create, novalue);
	REFUSED(key_create, optvalue);
	REFUSED(key_create, twice);
	REFUSED(key_create, switchval);
	REFUSED(key_create, extra);
	REFUSED(prune, ok);
#undef REFUSED
	memset(&a, 0, sizeof(a));
	CHECK_EQ_INT(args_parse(&key_create, 0, NULL, &a), CTL_USAGE);   /* missing NAME */
	memset(&a, 0, sizeof(a));
	CHECK_EQ_INT(args_parse(&prune, 0, NULL, &a), CTL_USAGE);   /* missing required option */
	memset(&a, 0, sizeof(a));
	CHECK_EQ_INT(args_parse(&prune, NARGS(days), days, &a), CTL_OK);
	CHECK_EQ_STR(a.val[OPT_OLDER_THAN_DAYS], "3");
	CHECK(a.operand == NULL);
	CHECK_EQ_INT(args_need_option(&prune, &a), CTL_OK);
	memset(&a, 0, sizeof(a));
	a.operand = "k1";   /* a set command given a name alone: nothing to change */
	CHECK_EQ_INT(args_need_option(&key_create, &a), CTL_USAGE);
}

static void test_global_opt(void)
{
	char *argv[] = { "tallyctl", "--db", "x.db", "--db=y.db", "--dbx", "--db=", "--secret", "--db" };
	const char *out = NULL;
	int i = 1;

	CHECK_EQ_INT(args_global_opt("db", NARGS(argv), argv, &i, &out), 1);
	CHECK_EQ_STR(out, "x.db");
	CHECK_EQ_INT(i, 2);
	i = 3;
	CHECK_EQ_INT(args_global_opt("db", NARGS(argv), argv, &i, &out), 1);
	CHECK_EQ_STR(out, "y.db");
	CHECK_EQ_INT(i, 3);
	i = 4;
	CHECK_EQ_INT(args_global_opt("db", NARGS(argv), argv, &i, &out), 0);
	i = 5;
	CHECK_EQ_INT(args_global_opt("db", NARGS(argv), argv, &i, &out), CTL_USAGE);
	i = 6;
	CHECK_EQ_INT(args_global_opt("db", NARGS(argv), argv, &i, &out), 0);
	i = 7;   /* the last argument: no value follows */
	CHECK_EQ_INT(args_global_opt("db", NARGS(argv), argv, &i, &out), CTL_USAGE);
}

/* limits_parse on the options of a. */
static int limit_opts(struct ctl_args *a, struct limits *l)
{
	static const struct ctl_command cmd = { .group = "team", .verb = "set" };

	memset(l, 0, sizeof(*l));
	return limits_parse(&cmd, a, l);
}

/* keys_opts_parse on the options of a (the operand does not matter). */
static int key_opts(struct ctl_args *a, struct keys_opts *o)
{
	static const struct ctl_command cmd = { .group = "key", .verb = "set" };

	memset(o, 0, sizeof(*o));
	return keys_opts_parse(&cmd, a, o);
}

static void test_limits(void)
{
	static const char *const lifted[] = { "", "none" };
	struct ctl_args a;
	struct limits l;
	size_t i;

	memset(&a, 0, sizeof(a));
	a.val[OPT_MODELS] = "m1,m2";
	a.val[OPT_RPM] = "none";
	a.val[OPT_TPM] = "100";
	a.val[OPT_BUDGET_USD] = "1.5";
	a.val[OPT_BUDGET_PERIOD] = "total";
	CHECK_EQ_INT(limit_opts(&a, &l), CTL_OK);
	CHECK(l.models_given);
	CHECK_EQ_INT(l.nmodels, 2);
	CHECK_EQ_STR(l.models[0], "m1");
	CHECK_EQ_STR(l.models[1], "m2");
	CHECK(limits_has_model(&l, "m2") && !limits_has_model(&l, "m3"));
	CHECK_EQ_STR(l.period, "total");
	/* rpm, tpm, max_concurrent, budget */
	CHECK(l.given[0] && l.bound[0] == NULL);
	CHECK(l.given[1] && l.bound[1] && *l.bound[1] == 100);
	CHECK(!l.given[2] && l.bound[2] == NULL);
	CHECK(l.given[3] && l.bound[3] && *l.bound[3] == 1500000);
	limits_free(&l);

	memset(&a, 0, sizeof(a));
	CHECK_EQ_INT(limit_opts(&a, &l), CTL_OK);   /* nothing given, nothing changes */
	CHECK(!l.models_given && l.period == NULL);
	for (i = 0; i < LIMITS_N; i++)
		CHECK(!l.given[i]);
	limits_free(&l);

	for (i = 0; i < sizeof(lifted) / sizeof(lifted[0]); i++) {
		memset(&a, 0, sizeof(a));
		a.val[OPT_MODELS] = lifted[i];   /* every model */
		CHECK_EQ_INT(limit_opts(&a, &l), CTL_OK);
		CHECK(l.models_given && l.nmodels == 0);
		limits_free(&l);
	}
}

static void test_key_opts(void)
{
	struct ctl_args a;
	struct keys_opts o;

	memset(&a, 0, sizeof(a));
	a.val[OPT_MODELS] = "m1,m2";
	a.val[OPT_DEFAULT_MODEL] = "m2";
	a.val[OPT_TPM] = "100";
	a.val[OPT_TEAM] = "eng";
	a.val[OPT_SERVICE_TIERS] = "default,priority";
	a.val[OPT_AUDIO] = "inherit";
	a.val[OPT_SERVER_TOOLS] = "deny";
	CHECK_EQ_INT(key_opts(&a, &o), CTL_OK);
	CHECK_EQ_INT(o.lim.nmodels, 2);   /* the limits are limits_parse's */
	CHECK(o.lim.given[1] && *o.lim.bound[1] == 100);
	CHECK_EQ_STR(o.def, "m2");
	CHECK(o.team_given);
	CHECK_EQ_STR(o.team, "eng");
	/* policies: service_tiers, server_tools, audio, cache_writes */
	CHECK(o.policy_given[0]);
	CHECK_EQ_STR(o.policy[0], "default,priority");
	CHECK_EQ_STR(o.policy[1], "deny");
	CHECK(o.policy_given[2] && o.policy[2] == NULL);
	CHECK(!o.policy_given[3]);
	CHECK(o.end_users == NULL);   /* not given: unchanged */
	keys_opts_free(&o);

	memset(&a, 0, sizeof(a));
	a.val[OPT_END_USERS] = "forbidden";
	CHECK_EQ_INT(key_opts(&a, &o), CTL_OK);
	CHECK_EQ_STR(o.end_users, "forbidden");
	keys_opts_free(&o);

	memset(&a, 0, sizeof(a));
	a.val[OPT_SERVICE_TIERS] = "";   /* '' clears, as inherit does */
	a.val[OPT_TEAM] = "none";        /* no team */
	CHECK_EQ_INT(key_opts(&a, &o), CTL_OK);
	CHECK(o.policy_given[0] && o.policy[0] == NULL);
	CHECK(o.team_given && o.team == NULL);
	keys_opts_free(&o);

	memset(&a, 0, sizeof(a));
	a.val[OPT_MODELS] = "none";
	a.val[OPT_DEFAULT_MODEL] = "m2";   /* every model: any default */
	CHECK_EQ_INT(key_opts(&a, &o), CTL_OK);
	CHECK(!o.team_given && o.team == NULL);
	keys_opts_free(&o);

	memset(&a, 0, sizeof(a));
	a.val[OPT_MODELS] = "m1";
	a.val[OPT_DEFAULT_MODEL] = "m2";   /* not in --models */
	CHECK_EQ_INT(key_opts(&a, &o), CTL_USAGE);
	keys_opts_free(&o);
}

/* Options refused alone, by limits_parse (for keys and teams) or by keys_opts_parse.
 * A key's limits are refused as a team's: by limits_parse. */
static void test_refused(void)
{
	static const struct {
		int limits;   /* 1: limits_parse, 0: keys_opts_parse */
		enum ctl_opt_id opt;
		const char *value;
	} cases[] = {
		{ 1, OPT_MODELS, "m1,,m2" }, { 1, OPT_MODELS, "m 1" }, { 1, OPT_MODELS, "," },
		{ 1, OPT_MODELS, "none,m1," }, { 1, OPT_RPM, "0" }, { 1, OPT_RPM, "-1" },
		{ 1, OPT_TPM, "1000000000001" }, { 1, OPT_MAX_CONCURRENT, "many" },
		{ 1, OPT_BUDGET_USD, "0" }, { 1, OPT_BUDGET_PERIOD, "year" },
		{ 1, OPT_BUDGET_PERIOD, "none" },
		{ 0, OPT_MODELS, "m1,,m2" }, { 0, OPT_RPM, "0" }, { 0, OPT_BUDGET_PERIOD, "Week" },
		{ 0, OPT_DEFAULT_MODEL, "a b" }, { 0, OPT_TEAM, "a b" }, { 0, OPT_TEAM, "" },
		{ 0, OPT_AUDIO, "maybe" }, { 0, OPT_CACHE_WRITES, "" },
		{ 0, OPT_SERVICE_TIERS, "Default" }, { 0, OPT_END_USERS, "inherit" },
		{ 0, OPT_END_USERS, "" }, { 0, OPT_END_USERS, "Required" },
	};
	struct ctl_args a;
	struct keys_opts o;
	struct limits l;
	int i;

	for (i = 0; i < NARGS(cases); i++) {
		memset(&a, 0, sizeof(a));
		a.val[cases[i].opt] = cases[i].value;
		if (cases[i].limits) {
			CHECK_EQ_INT(limit_opts(&a, &l), CTL_USAGE);
			limits_free(&l);
		} else {
			CHECK_EQ_INT(key_opts(&a, &o), CTL_USAGE);
			keys_opts_free(&o);
		}
	}
}

int main(void)
{
	RUN(test_valid_names);
	RUN(test_parse_int);
	RUN(test_parse_usd);
	RUN(test_parse_word);
	RUN(test_parse_yes_no);
	RUN(test_parse_tags);
	RUN(test_parse_args);
	RUN(test_global_opt);
	RUN(test_limits);
	RUN(test_key_opts);
	RUN(test_refused);
	return UNIT_DONE();
}
