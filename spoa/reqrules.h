/* reqrules: the request-body rules both sides of the gateway apply, written once
 * (constant data, any thread). spoa/reqbody.c judges a whole body by them; the Lua
 * capture filter judges a body past HAProxy's cut by the same lists, which
 * scripts/luarules.c writes into haproxy/scanner.lua (`make lua-rules`) and
 * tests/test_lua.py checks are current. */
#ifndef TALLY_REQRULES_H
#define TALLY_REQRULES_H

/* A top-level member that costs more than its tokens, and the letter of
 * txn.tally.costly (spoa/decision.c) under which a key may not ask for it. */
struct reqrules_costly {
	const char *member;
	char letter;
};

/* Each list ends with a NULL name. */
extern const char *const reqrules_judged[];
extern const struct reqrules_costly reqrules_costly[];
extern const char *const reqrules_client_tools[];
extern const char *const reqrules_client_tool_prefixes[];
extern const char *const reqrules_stateful[];

/* A tool type that starts with this is a web search the provider runs ('w'). */
#define REQRULES_WEB_SEARCH_PREFIX "web_search"

#endif
