/* Unit tests of reading an HAProxy configuration as HAProxy does (spoa/haproxycfg.c):
 * words, quotes, escapes, comments, variables and their defaults, .if blocks, sections,
 * addresses, the filter spoe lines and the SPOE configuration's use-backend.
 * Single-threaded. */
#include "haproxycfg.h"
#include "unit.h"

/* The environment of these tests: NAME=VALUE pairs, NULL-terminated. */
static const char *const test_vars[] = {
	"AGENT", "127.0.0.1:12345",
	"RECORDS", "127.0.0.1:12346",
	"EMPTY", "",
	"SPACED", "a b  c",
	"SECRET", "c2VjcmV0",
	NULL,
};

static const char *test_get(void *arg, const char *name)
{
	const char *const *v;

	(void)arg;
	for (v = test_vars; *v; v += 2)
		if (strcmp(v[0], name) == 0)
			return v[1];
	return NULL;
}

static const struct haproxycfg_env test_env = { test_get, NULL };
static struct haproxycfg_words words;

/* The words of line joined by '|', or "ERR: why". */
static const char *test_split(const char *line)
{
	static char joined[4096];
	char err[256];
	size_t used = 0;
	int i, n = haproxycfg_split(line, strlen(line), &test_env, &words, err, sizeof(err));

	if (n < 0) {
		snprintf(joined, sizeof(joined), "ERR: %s", err);
		return joined;
	}
	joined[0] = '\0';
	for (i = 0; i < n; i++)
		used += (size_t)snprintf(joined + used, sizeof(joined) - used, "%s%s", i ? "|" : "",
		                         words.w[i]);
	return joined;
}

static void test_words(void)
{
	CHECK_EQ_STR(test_split("  server agent1   127.0.0.1:1 check  "), "server|agent1|127.0.0.1:1|check");
	CHECK_EQ_STR(test_split("log stderr # a comment"), "log|stderr");
	CHECK_EQ_STR(test_split("a#b c"), "a");     /* HAProxy: a comment anywhere */
	CHECK_EQ_STR(test_split("\"quoted # not a comment\" x"), "quoted # not a comment|x");
	CHECK_EQ_STR(test_split("'single ${AGENT} $AGENT' x"), "single ${AGENT} $AGENT|x");
	CHECK_EQ_STR(test_split("a\"b c\"d"), "ab cd");
	CHECK_EQ_STR(test_split("\"\" x"), "|x");
	CHECK_EQ_STR(test_split("a\\ b \\#c \\x41 \\q"), "a b|#c|A|\\q");
	CHECK_EQ_STR(test_split("\"a\\\"b\" 'it''s'"), "a\"b|its");
	CHECK_EQ_STR(test_split("line\r\nnext"), "line");
	CHECK_EQ_STR(test_split(""), "");
	CHECK_EQ_STR(test_split("   # only a comment"), "");
	CHECK_EQ_INT(words.unset[0], 0);
	/* errors HAProxy refuses the file for */
	CHECK(strstr(test_split("\"open"), "unterminated quote") != NULL);
	CHECK(strstr(test_split("'open"), "unterminated quote") != NULL);
	CHECK(strstr(test_split("\\xZ1"), "\\x") != NULL);
	{
		char many[400] = "";
		int i;

		for (i = 0; i < HAPROXYCFG_MAX_WORDS + 1; i++)
			strcat(many, "w ");
		CHECK(strstr(test_split(many), "too many words") != NULL);
		many[strlen(many) - 3] = '\0';   /* exactly the maximum */
		CHECK(strncmp(test_split(many), "ERR", 3) != 0);
		CHECK_EQ_INT(words.n, HAPROXYCFG_MAX_WORDS);
	}
}

static void test_variables(void)
{
	/* Expanded inside double quotes only, as HAProxy does. */
	CHECK_EQ_STR(test_split("server a \"${AGENT}\""), "server|a|127.0.0.1:12345");
	CHECK_EQ_STR(test_split("server a \"$AGENT\" x"), "server|a|127.0.0.1:12345|x");
	CHECK_EQ_STR(test_split("server a ${AGENT}"), "server|a|${AGENT}");
	CHECK_EQ_STR(test_split("\"ipv4@${AGENT}/x\""), "ipv4@127.0.0.1:12345/x");
	CHECK_EQ_STR(test_split("\"$AGENT-x\""), "127.0.0.1:12345-x");
	CHECK_EQ_STR(test_split("\"\\${AGENT}\""), "${AGENT}");
	/* Defaults replace unset variables, not empty ones. */
	CHECK_EQ_STR(test_split("\"${NOPE-10.0.0.1:9}\""), "10.0.0.1:9");
	CHECK_EQ_INT(words.unset[0], 0);
	CHECK_EQ_STR(test_split("\"${AGENT-10.0.0.1:9}\""), "127.0.0.1:12345");
	CHECK_EQ_STR(test_split("x \"${EMPTY-default}\" y"), "x||y");
	CHECK_EQ_STR(test_split("\"${NOPE-}\" y"), "|y");
	/* An unset variable is an empty word, and noted. */
	CHECK_EQ_STR(test_split("server a \"${NOPE}\" check"), "server|a||check");
	CHECK_EQ_STR(words.unset, "NOPE");
	CHECK_EQ_STR(test_split("\"${NOPE}${AGENT}\""), "127.0.0.1:12345");
	CHECK_EQ_STR(words.unset, "NOPE");
	/* [*] splits the value into words. */
	CHECK_EQ_STR(test_split("bind \"${SPACED[*]}\" z"), "bind|a|b|c|z");
	CHECK_EQ_STR(test_split("bind \"${SPACED}\""), "bind|a b  c");
	/* pseudo-variables expand to nothing here */
	CHECK_EQ_STR(test_split("x \"${.LINE}\""), "x|");
	CHECK(strncmp(test_split("\"${AGENT\""), "ERR", 3) == 0);
	CHECK(strncmp(test_split("\"${1X}\""), "ERR", 3) == 0);
	CHECK(strncmp(test_split("\"${.NOPE}\""), "ERR", 3) == 0);
	CHECK(strncmp(test_split("\"${SPACED[x]}\""), "ERR", 3) == 0);
}

static void test_addr_match(void)
{
	CHECK(haproxycfg_addr_match("127.0.0.1:12345", "127.0.0.1:12345"));
	CHECK(haproxycfg_addr_match("127.0.0.1:12345", "ipv4@127.0.0.1:12345"));
	CHECK(haproxycfg_addr_match("127.0.0.1:12346", "udp@127.0.0.1:12346"));
	CHECK(haproxycfg_addr_match("127.0.0.1:12346", "TCP@127.0.0.1:12346"));
	CHECK(!haproxycfg_addr_match("127.0.0.1:12345", "127.0.0.1:1234"));
	CHECK(!haproxycfg_addr_match("127.0.0.1:1234", "127.0.0.1:12345"));
	CHECK(!haproxycfg_addr_match("127.0.0.1:12345", "127.0.0.2:12345"));
	CHECK(!haproxycfg_addr_match("127.0.0.1:12345", ""));
	CHECK(!haproxycfg_addr_match("127.0.0.1:12345", "ring@tally-records"));
	CHECK(!haproxycfg_addr_match("127.0.0.1:12345", "stderr"));
	CHECK(!haproxycfg_addr_match("127.0.0.1:12345", "fd@3"));
	/* as written: no resolving */
	CHECK(!haproxycfg_addr_match("127.0.0.1:12345", "localhost:12345"));
	CHECK(haproxycfg_addr_match("LocalHost:12345", "localhost:12345"));
	/* a wildcard agent is reached at any host on its port */
	CHECK(haproxycfg_addr_match("0.0.0.0:12345", "10.1.2.3:12345"));
	CHECK(haproxycfg_addr_match(":12345", "127.0.0.1:12345"));
	CHECK(haproxycfg_addr_match("[::]:12345", "[::1]:12345"));
	CHECK(!haproxycfg_addr_match("0.0.0.0:12345", "10.1.2.3:12346"));
	/* IPv6 */
	CHECK(haproxycfg_addr_match("[::1]:12345", "[::1]:12345"));
	CHECK(haproxycfg_addr_match("[::1]:12345", "ipv6@::1:12345"));
	CHECK(!haproxycfg_addr_match("[::1]:12345", "[::2]:12345"));
	/* unix sockets */
	CHECK(haproxycfg_addr_match("unix:/run/tally/spop.sock", "/run/tally/spop.sock"));
	CHECK(haproxycfg_addr_match("unix:/run/tally/spop.sock", "unix@/run/tally/spop.sock"));
	CHECK(!haproxycfg_addr_match("unix:/run/tally/spop.sock", "/run/tally/other.sock"));
	CHECK(!haproxycfg_addr_match("unix:/run/tally/spop.sock", "127.0.0.1:12345"));
	CHECK(!haproxycfg_addr_match("127.0.0.1:12345", "/run/tally/spop.sock"));
	/* a log target without a port is on 514 */
	CHECK(haproxycfg_addr_match("127.0.0.1:514", "127.0.0.1"));
	CHECK(!haproxycfg_addr_match("127.0.0.1:12346", "127.0.0.1"));
	/* the agent's own address must have a port */
	CHECK(!haproxycfg_addr_match("127.0.0.1", "127.0.0.1"));
}

/* The shape of haproxy/tally.cfg, trimmed to what the self-check reads. */
static const char test_cfg[] =
	"# tally gateway\n"
	".if !defined(TALLY_PLAIN)\n"
	".if streq(\"${SECRET}\",\"\")\n"
	".alert \"no secret\"\n"
	".endif\n"
	".endif\n"
	"global\n"
	"    log stderr format short local0 notice\n"
	"ring tally-records\n"
	"    format rfc5424\n"
	"    server agent \"${RECORDS}\"\n"
	"defaults\n"
	"    log global\n"
	"frontend gateway\n"
	"    bind \"${NOPE-127.0.0.1:8080}\"\n"
	".if !defined(TALLY_PLAIN)\n"
	"    log ring@tally-records len 8192 format raw local0 info\n"
	"    log \"${RECORDS}\" len 8192 format raw local0 info\n"
	"    filter spoe engine tally config \"${SPOE_CONF-/etc/tally/spoe-tally.conf}\"\n"
	".endif\n"
	"backend be_mock\n"
	"    server mock 127.0.0.1:8090\n"
	"backend tally-agents\n"
	"    mode tcp\n"
	".if version_atleast(3.1)\n"
	"    mode spop\n"
	".endif\n"
	"    server agent1 \"${AGENT}\" check inter 1s\n";

static int test_find(const char *text, enum haproxycfg_what what, const char *addr,
                     const char *backend, struct haproxycfg_found *f)
{
	return haproxycfg_find(text, strlen(text), what, addr, backend, &test_env, f);
}

static void test_find_in_config(void)
{
	struct haproxycfg_found f;

	CHECK_EQ_INT(test_find(test_cfg, HAPROXYCFG_SERVER, "127.0.0.1:12345", "tally-agents", &f), 1);
	CHECK_EQ_INT(f.line, 28);
	CHECK_EQ_STR(f.section, "tally-agents");
	CHECK_EQ_STR(f.server, "agent1");
	CHECK_EQ_INT(f.section_seen, 1);
	/* any backend */
	CHECK_EQ_INT(test_find(test_cfg, HAPROXYCFG_SERVER, "127.0.0.1:12345", NULL, &f), 1);
	CHECK_EQ_STR(f.section, "tally-agents");
	/* not in another backend; what that one has instead */
	CHECK_EQ_INT(test_find(test_cfg, HAPROXYCFG_SERVER, "127.0.0.1:12345", "be_mock", &f), 0);
	CHECK_EQ_INT(f.section_seen, 1);
	CHECK_EQ_STR(f.others, "127.0.0.1:8090");
	CHECK_EQ_INT(test_find(test_cfg, HAPROXYCFG_SERVER, "127.0.0.1:12345", "be_none", &f), 0);
	CHECK_EQ_INT(f.section_seen, 0);
	/* a ring's server is no backend's */
	CHECK_EQ_INT(test_find(test_cfg, HAPROXYCFG_SERVER, "127.0.0.1:12346", NULL, &f), 0);
	CHECK(strstr(f.others, "127.0.0.1:8090") && strstr(f.others, "127.0.0.1:12345"));
	/* the records address: on the ring, which a log line uses, and a log target */
	CHECK_EQ_INT(test_find(test_cfg, HAPROXYCFG_RING, "127.0.0.1:12346", NULL, &f), 1);
	CHECK_EQ_STR(f.section, "tally-records");
	CHECK_EQ_INT(f.line, 11);
	CHECK_EQ_INT(f.ring_used, 1);
	CHECK_EQ_INT(test_find(test_cfg, HAPROXYCFG_LOG, "127.0.0.1:12346", NULL, &f), 1);
	CHECK_EQ_INT(f.line, 18);
	CHECK_EQ_INT(test_find(test_cfg, HAPROXYCFG_LOG, "127.0.0.1:9999", NULL, &f), 0);
	CHECK_EQ_STR(f.others, "stderr, ring@tally-records, 127.0.0.1:12346");
	CHECK_EQ_INT(test_find(test_cfg, HAPROXYCFG_RING, "127.0.0.1:9999", NULL, &f), 0);
	CHECK_EQ_STR(f.others, "127.0.0.1:12346");
}

/* Runs a find with TALLY_PLAIN defined too. */
static const char *test_get_plain(void *arg, const char *name)
{
	return strcmp(name, "TALLY_PLAIN") == 0 ? "1" : test_get(arg, name);
}

static void test_conditions(void)
{
	static const struct haproxycfg_env plain = { test_get_plain, NULL };
	struct haproxycfg_found f;
	static const char text[] =
		"frontend f\n"
		".if 0\n"
		"    log 10.0.0.1:1 local0\n"
		".elif streq(\"${AGENT}\",\"127.0.0.1:12345\")\n"
		"    log 10.0.0.2:1 local0\n"
		".else\n"
		"    log 10.0.0.3:1 local0\n"
		".endif\n"
		".if version_atleast(9.9) && defined(AGENT)\n"
		"    log 10.0.0.4:1 local0\n"
		".else\n"
		"    log 10.0.0.5:1 local0\n"
		".endif\n"
		".if defined(NOPE) || !strneq(a,a)\n"
		"    log 10.0.0.6:1 local0\n"
		".elif (1 && strstr(\"${AGENT}\",12345))\n"
		"    log 10.0.0.7:1 local0\n"
		".if 1\n"
		".else\n"
		"    log 10.0.0.8:1 local0\n"
		".endif\n"
		".endif\n"
		".if unknown_predicate(x)\n"
		"    log 10.0.0.9:1 local0\n"
		".endif\n"
		".if\n"
		"    log 10.0.1.0:1 local0\n"
		".endif\n";

	CHECK_EQ_INT(test_find(text, HAPROXYCFG_LOG, "127.0.0.1:1", NULL, &f), 0);
	/* Surely skipped: .1, .3, .6, .8 and the empty condition's; the unknown ones are
	 * counted in, both branches of an unknown .if. */
	CHECK_EQ_STR(f.others, "10.0.0.2:1, 10.0.0.4:1, 10.0.0.5:1, 10.0.0.7:1, 10.0.0.9:1");
	/* TALLY_PLAIN skips the records' log lines of test_cfg */
	CHECK_EQ_INT(haproxycfg_find(test_cfg, strlen(test_cfg), HAPROXYCFG_LOG,
	                             "127.0.0.1:12346", NULL, &plain, &f), 0);
	CHECK_EQ_STR(f.others, "stderr");
	CHECK_EQ_INT(haproxycfg_find(test_cfg, strlen(test_cfg), HAPROXYCFG_RING,
	                             "127.0.0.1:12346", NULL, &plain, &f), 1);
	CHECK_EQ_INT(f.ring_used, 0);
	/* blocks that do not close, or close what was not opened */
	CHECK_EQ_INT(test_find("frontend f\n.if 1\nlog 1.2.3.4:5 x\n", HAPROXYCFG_LOG, "1.2.3.4:6",
	                       NULL, &f), -1);
	CHECK(strstr(f.err, ".endif") != NULL);
	CHECK_EQ_INT(test_find("frontend f\n.endif\n", HAPROXYCFG_LOG, "1.2.3.4:5", NULL, &f), -1);
	CHECK(strstr(f.err, "line 2") != NULL);
}

static void test_find_failures(void)
{
	struct haproxycfg_found f;
	static const char unused_ring[] =
		"ring r1\n    server a \"${RECORDS}\"\n"
		"ring r2\n    server a 127.0.0.1:12346\n"
		"frontend f\n    log ring@r2 local0\n";

	/* An .alert HAProxy surely reaches: it would not start. */
	CHECK_EQ_INT(test_find("global\n.if defined(AGENT)\n.alert \"stop here\"\n.endif\n",
	                       HAPROXYCFG_LOG, "1.2.3.4:5", NULL, &f), -1);
	CHECK(strstr(f.err, "stop here") != NULL && strstr(f.err, "line 3") != NULL);
	/* only maybe reached: counted as fine */
	CHECK_EQ_INT(test_find("global\n.if feature(X)\n.alert \"stop\"\n.endif\n",
	                       HAPROXYCFG_LOG, "1.2.3.4:5", NULL, &f), 0);
	/* a line HAProxy would refuse */
	CHECK_EQ_INT(test_find("global\n  log \"1.2.3.4:5 local0\n", HAPROXYCFG_LOG, "1.2.3.4:5",
	                       NULL, &f), -1);
	CHECK(strstr(f.err, "line 2") && strstr(f.err, "unterminated quote"));
	/* ... unless it is in a block HAProxy skips */
	CHECK_EQ_INT(test_find("global\n.if 0\n  log \"x\n.endif\n", HAPROXYCFG_LOG, "1.2.3.4:5",
	                       NULL, &f), 0);
	/* An unset variable on the lines looked at is reported. */
	CHECK_EQ_INT(test_find("ring r\n  server a \"${RECORDS_ADDR}\"\n", HAPROXYCFG_RING,
	                       "127.0.0.1:12346", NULL, &f), 0);
	CHECK_EQ_STR(f.unset, "RECORDS_ADDR");
	CHECK_EQ_STR(f.others, "\"\"");
	/* The ring some log line uses wins over one none uses. */
	CHECK_EQ_INT(test_find(unused_ring, HAPROXYCFG_RING, "127.0.0.1:12346", NULL, &f), 1);
	CHECK_EQ_STR(f.section, "r2");
	CHECK_EQ_INT(f.ring_used, 1);
	CHECK_EQ_INT(test_find("ring r1\n    server a 127.0.0.1:12346\nfrontend f\n  log ring@r2 x\n",
	                       HAPROXYCFG_RING, "127.0.0.1:12346", NULL, &f), 1);
	CHECK_EQ_STR(f.section, "r1");
	CHECK_EQ_INT(f.ring_used, 0);
	/* servers outside backends, rings and listen sections are not servers of theirs */
	CHECK_EQ_INT(test_find("peers p\n  server a 127.0.0.1:12345\n", HAPROXYCFG_SERVER,
	                       "127.0.0.1:12345", NULL, &f), 0);
	CHECK_EQ_INT(test_find("listen l\n  server a 127.0.0.1:12345\n", HAPROXYCFG_SERVER,
	                       "127.0.0.1:12345", "l", &f), 1);
	/* a commented-out line counts for nothing */
	CHECK_EQ_INT(test_find("backend b\n  # server a 127.0.0.1:12345\n", HAPROXYCFG_SERVER,
	                       "127.0.0.1:12345", "b", &f), 0);
	CHECK_EQ_INT(test_find("", HAPROXYCFG_LOG, "127.0.0.1:12346", NULL, &f), 0);
	CHECK_EQ_STR(f.others, "");
}

static void test_spoe(void)
{
	struct haproxycfg_spoe spoe[4];
	char err[256], backend[128];
	static const char conf[] =
		"# outside any scope\n"
		"spoe-agent outside\n"
		"    use-backend be_outside\n"
		"[other]\n"
		"spoe-agent other-agent\n"
		"    use-backend be_other\n"
		"[tally]\n"
		"spoe-agent tally-agent\n"
		"    groups decide\n"
		"    timeout hello 500ms\n"
		"    use-backend tally-agents\n"
		"spoe-message tally-request\n"
		"    args id=unique-id\n";
	static const char filters[] =
		"frontend f\n filter spoe config a.conf\n filter compression\n"
		" filter spoe engine e config b.conf\n";
	static const char message[] = "spoe-message m\n use-backend b\n";
	static const char broken[] = "spoe-agent a\n use-backend \"b\n";

	CHECK_EQ_INT(haproxycfg_spoe_filters(test_cfg, strlen(test_cfg), &test_env, spoe, 4, err,
	                                     sizeof(err)), 1);
	CHECK_EQ_INT(spoe[0].line, 19);
	CHECK_EQ_STR(spoe[0].engine, "tally");
	CHECK_EQ_STR(spoe[0].config, "/etc/tally/spoe-tally.conf");
	CHECK_EQ_INT(haproxycfg_spoe_filters(filters, strlen(filters), &test_env, spoe, 4, err,
	                                     sizeof(err)), 2);
	CHECK_EQ_STR(spoe[0].config, "a.conf");
	CHECK_EQ_STR(spoe[0].engine, "");
	CHECK_EQ_STR(spoe[1].config, "b.conf");
	CHECK_EQ_INT(haproxycfg_spoe_filters("frontend f\n", 11, &test_env, spoe, 4, err, sizeof(err)), 0);

	CHECK_EQ_INT(haproxycfg_spoe_backend(conf, strlen(conf), "tally", &test_env, backend,
	                                     sizeof(backend), err, sizeof(err)), 1);
	CHECK_EQ_STR(backend, "tally-agents");
	CHECK_EQ_INT(haproxycfg_spoe_backend(conf, strlen(conf), "other", &test_env, backend,
	                                     sizeof(backend), err, sizeof(err)), 1);
	CHECK_EQ_STR(backend, "be_other");
	/* no engine: only what is outside every scope */
	CHECK_EQ_INT(haproxycfg_spoe_backend(conf, strlen(conf), "", &test_env, backend,
	                                     sizeof(backend), err, sizeof(err)), 1);
	CHECK_EQ_STR(backend, "be_outside");
	CHECK_EQ_INT(haproxycfg_spoe_backend(conf, strlen(conf), "nope", &test_env, backend,
	                                     sizeof(backend), err, sizeof(err)), 0);
	/* use-backend outside a spoe-agent section does not count */
	CHECK_EQ_INT(haproxycfg_spoe_backend(message, strlen(message), "", &test_env, backend,
	                                     sizeof(backend), err, sizeof(err)), 0);
	CHECK_EQ_INT(haproxycfg_spoe_backend(broken, strlen(broken), "", &test_env, backend,
	                                     sizeof(backend), err, sizeof(err)), -1);
}


/* Where sections start and end, and what the line numbers count. */
static void test_sections(void)
{
	struct haproxycfg_found f;
	char deep[1024] = "global\n";
	int i;

	/* a section keyword ends the backend before it, indented or not */
	CHECK_EQ_INT(test_find("backend b\n  server a 127.0.0.1:1\n  frontend f\n  server c 127.0.0.1:2\n",
	                       HAPROXYCFG_SERVER, "127.0.0.1:2", "b", &f), 0);
	CHECK_EQ_STR(f.others, "127.0.0.1:1");
	CHECK_EQ_INT(test_find("backend b\nbackends x\n  server c 127.0.0.1:2\n", HAPROXYCFG_SERVER,
	                       "127.0.0.1:2", "b", &f), 1);
	CHECK_EQ_INT(f.line, 3);
	/* a listen section is a backend too; its name is what the find names */
	CHECK_EQ_INT(test_find("listen \"${EMPTY}l2\"\n  server s 127.0.0.1:3\n", HAPROXYCFG_SERVER,
	                       "127.0.0.1:3", "l2", &f), 1);
	CHECK_EQ_STR(f.section, "l2");
	CHECK_EQ_STR(f.server, "s");
	/* CRLF line ends, blank and comment lines count as lines */
	CHECK_EQ_INT(test_find("global\r\n\r\n# c\r\nbackend b\r\n  server s 127.0.0.1:4\r\n",
	                       HAPROXYCFG_SERVER, "127.0.0.1:4", "b", &f), 1);
	CHECK_EQ_INT(f.line, 5);
	/* "log global" names no target; a log target without a port is on 514 */
	CHECK_EQ_INT(test_find("defaults\n  log global\n  log 10.0.0.1 local0\n", HAPROXYCFG_LOG,
	                       "10.0.0.1:514", NULL, &f), 1);
	CHECK_EQ_INT(f.line, 3);
	/* .if blocks nest 64 deep at most */
	for (i = 0; i < 65; i++)
		strcat(deep, ".if 1\n");
	CHECK_EQ_INT(test_find(deep, HAPROXYCFG_LOG, "10.0.0.1:1", NULL, &f), -1);
	CHECK(strstr(f.err, "nested too deep") != NULL);
	CHECK_EQ_INT(test_find("global\n.else\n", HAPROXYCFG_LOG, "10.0.0.1:1", NULL, &f), -1);
	CHECK(strstr(f.err, ".else without .if") != NULL);
}

int main(void)
{
	RUN(test_words);
	RUN(test_variables);
	RUN(test_addr_match);
	RUN(test_find_in_config);
	RUN(test_conditions);
	RUN(test_find_failures);
	RUN(test_spoe);
	RUN(test_sections);
	return UNIT_DONE();
}
