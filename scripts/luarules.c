/* luarules: prints spoa/reqrules.c's lists as the Lua block haproxy/scanner.lua holds
 * between its "-- BEGIN reqrules" and "-- END reqrules" lines (`make lua-rules` puts
 * it there; tests/test_lua.py checks that it is there). */
#include <stdio.h>

#include "reqrules.h"

static void luarules_set(const char *name, const char *const *list)
{
	printf("local %s = {\n", name);
	for (; *list; list++)
		printf("    [\"%s\"] = true,\n", *list);
	printf("}\n");
}

int main(void)
{
	const struct reqrules_costly *c;
	const char *const *p;

	printf("-- BEGIN reqrules: generated from spoa/reqrules.c by `make lua-rules`\n");
	luarules_set("JUDGED", reqrules_judged);
	printf("local COSTLY = {\n");
	for (c = reqrules_costly; c->member; c++)
		printf("    [\"%s\"] = \"%c\",\n", c->member, c->letter);
	printf("}\n");
	luarules_set("CLIENT_TOOLS", reqrules_client_tools);
	printf("local CLIENT_TOOL_PREFIXES = {");
	for (p = reqrules_client_tool_prefixes; *p; p++)
		printf(" \"%s\",", *p);
	printf(" }\n");
	printf("local WEB_SEARCH_PREFIX = \"%s\"\n", REQRULES_WEB_SEARCH_PREFIX);
	luarules_set("STATEFUL", reqrules_stateful);
	printf("-- END reqrules\n");
	return 0;
}
