/* reqrules: the lists of request members and tool types that decide a request's fate,
 * shared by reqbody.c and capture.lua (reqrules.h). Data only. */
#include "reqrules.h"

#include <stddef.h>

/* Members whose reading decides the verdict: they must be unambiguous. */
const char *const reqrules_judged[] = { "model", "stream", "stream_options", "service_tier",
                                        NULL };

/* 'o': tools the provider runs (chat's web search and Anthropic's MCP servers report no
 * count of them); 'a': audio output. */
const struct reqrules_costly reqrules_costly[] = {
	{ "web_search_options", 'o' }, { "mcp_servers", 'o' }, { "audio", 'a' },
	{ "modalities", 'a' }, { NULL, 0 },
};

/* The client's own tools, by type: any other type is one the provider runs. A
 * namespace groups functions (Codex CLI's). */
const char *const reqrules_client_tools[] = { "function", "custom", "local_shell", "shell",
                                              "apply_patch", "computer_use_preview",
                                              "namespace", NULL };
const char *const reqrules_client_tool_prefixes[] = { "bash_", "text_editor_", "computer_",
                                                      "memory_", NULL };

/* Members naming state stored upstream, or that the gateway cannot account or keep to
 * their key (a cut Responses body with one is refused: txn.tally.nostate). */
const char *const reqrules_stateful[] = { "previous_response_id", "conversation",
                                          "background", "request_id", NULL };
