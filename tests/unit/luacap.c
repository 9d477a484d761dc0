/* luacap: see luacap.h. One Lua state per process, made on first use. */
#include "luacap.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The checkout the binary was built in (the Makefile says), where the Lua files are. */
#ifndef TALLY_ROOT
#define TALLY_ROOT "."
#endif

static lua_State *luacap_state;

/* The tree's root: TALLY_ROOT from the environment, else the checkout built in. */
static lua_State *luacap_open(void)
{
	const char *root = getenv("TALLY_ROOT");
	char path[4096];

	if (luacap_state)
		return luacap_state;
	if (!root)
		root = TALLY_ROOT;
	luacap_state = luaL_newstate();
	luaL_openlibs(luacap_state);
	lua_pushstring(luacap_state, root);
	lua_setglobal(luacap_state, "TALLY_ROOT");
	snprintf(path, sizeof(path), "%s/tests/lua/answer.lua", root);
	if (luaL_dofile(luacap_state, path) != LUA_OK) {
		fprintf(stderr, "luacap: %s\n", lua_tostring(luacap_state, -1));
		lua_close(luacap_state);
		luacap_state = NULL;
	}
	return luacap_state;
}

int luacap_read(const char *body, size_t len, size_t split, int sse, int count_ws,
                char *out, size_t cap, int64_t *ws)
{
	lua_State *L = luacap_open();
	const char *field;
	size_t flen;
	int rc = -1;

	*ws = -1;
	if (!L || !cap)
		return -1;
	lua_getglobal(L, "tally_read_answer");
	lua_pushlstring(L, body, len);
	lua_pushinteger(L, (lua_Integer)split);
	lua_pushstring(L, sse ? "text/event-stream" : "application/json");
	lua_pushboolean(L, count_ws);
	if (lua_pcall(L, 4, 2, 0) != LUA_OK) {
		fprintf(stderr, "luacap: %s\n", lua_tostring(L, -1));
		lua_pop(L, 1);
		return -1;
	}
	field = lua_tolstring(L, -2, &flen);
	if (field && flen < cap) {
		memcpy(out, field, flen + 1);
		rc = 0;
	}
	if (lua_isinteger(L, -1))
		*ws = (int64_t)lua_tointeger(L, -1);
	lua_pop(L, 2);
	return rc;
}

const char *luacap_summary(const char *field)
{
	const char *p = field;
	int i;

	for (i = 0; i < 3 && p; i++)
		if ((p = strchr(p, ' ')))
			p++;
	return p;
}
