/* tallyctl: the operator CLI. Manages API keys, teams, models and providers in the
 * database; the agent notices every change through meta.config_generation. This file
 * holds main, the command table with every command's help, and the dispatch; each
 * group of commands lives in its own module.
 * Single-threaded. Exit status: 0 success, 1 runtime failure, 2 usage error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "ctl.h"
#include "endusers.h"
#include "keys.h"
#include "maintenance.h"
#include "modelbudgets.h"
#include "models.h"
#include "priceimport.h"
#include "prices.h"
#include "providers.h"
#include "tagbudgets.h"
#include "teams.h"

#define CTL_DEFAULT_DB   "./data/tally.db"

/* ---- command table and help ---- */

#define LIST_HELP(what)                                                                 \
	"Lists " what " as an aligned table, or with --json as a JSON array of objects.\n" \
	"Times are UTC (text) or unix seconds (JSON).\n"                                   \
	"\n"                                                                                \
	"  --json  print JSON\n"

#define LIMIT_SYNOPSIS "[--rpm N] [--tpm N] [--max-concurrent N] " BUDGET_SYNOPSIS \
                       " [--budget-tz ZONE]"

#define BUDGET_SYNOPSIS "[--budget-usd X] [--budget-period day|week|month|total]"

/* none: what else --budget-usd takes, after its dollars. */
#define BUDGET_HELP(none)                                                           \
	"  --budget-usd X         spend per period in dollars (> 0), at most 6 decimals\n"  \
	"                         (12.5, 0.000001), up to 1000000000" none "\n"            \
	"  --budget-period P      day, week (from Monday), month (the default) or total\n"   \
	"                         (ever); periods begin at 00:00 UTC\n"

#define LIMIT_HELP                                                                  \
	"  --rpm N                requests per minute, 1-1000000000000, or none\n"          \
	"  --tpm N                tokens per minute, 1-1000000000000, or none\n"            \
	"  --max-concurrent N     requests in flight, 1-1000000000000, or none\n"           \
	BUDGET_HELP(", or none")                                                        \
	"  --budget-tz ZONE       the budget's periods begin at 00:00 in ZONE instead, a\n"  \
	"                         name of the system's tzdata (Asia/Kolkata,\n"              \
	"                         America/New_York), or UTC\n"                              \
	"\n"

#define TEAM_SEE_SYNOPSIS "[--members-see-usage yes|no]"

#define TEAM_SEE_HELP                                                                   \
	"  --members-see-usage yes|no\n"                                                \
	"                         yes: its keys may read the team's usage, not only\n"  \
	"                         their own, on GET /tally/v1/usage; no: their own alone\n"

#define TAGS_SYNOPSIS "[--tags NAME=VALUE,...]"

#define TAGS_HELP(whose)                                                                \
	"  --tags NAME=VALUE,...  tags every request of " whose " carries, which a\n"     \
	"                         request cannot change (docs/limits.md, \"Tags\"), e.g.\n" \
	"                         env=prod,owner=search; stored sorted by name; '': none\n"

#define TEAM_OPT_HELP                                                                   \
	"  --team TEAM            the team the key belongs to (must exist); none: no team\n"

#define KEY_POLICY_SYNOPSIS                                                             \
	"[--service-tiers T1,T2,...] [--server-tools P] [--audio P] [--cache-writes P] "   \
	"[--end-users E]"

#define KEY_POLICY_HELP                                                                 \
	"  --service-tiers T1,T2  tiers requests may ask for (names from a-z 0-9 _ -),\n"   \
	"                         e.g. default or default,priority; '' or inherit: the\n"  \
	"                         agent's default\n"                                        \
	"  --server-tools P       tools the provider runs (web search): priced (while\n"   \
	"                         the model prices them), allow, deny, or inherit\n"       \
	"  --audio P              audio in or out: priced, allow, deny, or inherit\n"       \
	"  --cache-writes P       prompt cache writes (cache_control): priced (refused\n"  \
	"                         when the model's card has no cache-write price),\n"     \
	"                         allow, deny, or inherit (the agent's --cache-writes)\n"  \
	"  --end-users E          whether a request names its end user: optional (it\n"  \
	"                         may), required (refused without one) or forbidden\n"   \
	"                         (refused with one); never inherited\n"                \
	"\n"

#define CARD_PRICE_SYNOPSIS                                                             \
	"[--input-micros N] [--cached-micros N] [--cache-write-micros N] "                \
	"[--cache-write-1h-micros N] [--output-micros N] [--reasoning-micros N] "         \
	"[--audio-input-micros N] [--audio-output-micros N] [--web-search-micros-per-call N]"

#define CARD_PRICE_HELP                                                                 \
	"\n"                                                                              \
	"Prices, integer micro-dollars per million tokens (1000000 = $1 per Mtok), from\n" \
	"0 to 1000000000000:\n"                                                           \
	"  --input-micros N           prompt tokens\n"                                    \
	"  --cached-micros N          prompt tokens read from the provider's cache\n"     \
	"  --cache-write-micros N     prompt tokens written to the cache (5 minutes)\n"   \
	"  --cache-write-1h-micros N  written to the cache for an hour (unset: at\n"      \
	"                             --cache-write-micros)\n"                            \
	"  --output-micros N          completion tokens\n"                                \
	"  --reasoning-micros N       reasoning tokens (unset: at --output-micros)\n"     \
	"  --audio-input-micros N     audio prompt tokens\n"                              \
	"  --audio-output-micros N    audio completion tokens\n"                          \
	"  --web-search-micros-per-call N  micro-dollars per web search\n"

static const struct ctl_command tallyctl_commands[] = {
	{ "key", "create", "key create NAME|--name NAME [--team TEAM] [--models M1,M2,...] "
	  "[--default-model MODEL] " LIMIT_SYNOPSIS " " KEY_POLICY_SYNOPSIS " " TAGS_SYNOPSIS,
	  "Creates an API key and prints it alone on stdout. The key is shown this once:\n"
	  "only its HMAC-SHA256 hash (keyed with the secret file, created if missing) and\n"
	  "its first 12 characters (the prefix, for identification) are stored.\n"
	  "\n"
	  "  NAME, --name NAME      unique, 1-64 characters from A-Z a-z 0-9 . _ -;\n"
	  "                         give it one way, not both\n"
	  TEAM_OPT_HELP
	  "  --models M1,M2,...     allow only these models (each must exist);\n"
	  "                         without it ('' or none too) the key may use every model\n"
	  "  --default-model MODEL  model for requests that name none; must exist and,\n"
	  "                         with --models, be one of them\n"
	  TAGS_HELP("the key")
	  LIMIT_HELP
	  KEY_POLICY_HELP
	  "A limit or policy not given is unset: no limit, the agent's default policy;\n"
	  "--end-users not given is optional.\n",
	  "NAME", OPT(OPT_NAME) | OPT(OPT_TEAM) | OPT(OPT_MODELS) | OPT(OPT_DEFAULT_MODEL) | LIMIT_OPTS |
	  KEY_POLICY_OPTS | OPT(OPT_TAGS), 0, OPT(OPT_NAME), keys_create },
	{ "key", "set", "key set NAME [--team TEAM|none] [--models M1,M2,...] [--default-model MODEL] "
	  LIMIT_SYNOPSIS " " KEY_POLICY_SYNOPSIS " " TAGS_SYNOPSIS,
	  "Changes the key named NAME; options not given keep their value. At least one\n"
	  "option is required. The running agent applies the change at its next reload.\n"
	  "\n"
	  TEAM_OPT_HELP
	  "  --models M1,M2,...     replace the allow-list (each model must exist);\n"
	  "                         '' or none: every model\n"
	  "  --default-model MODEL  model for requests that name none; must exist and be\n"
	  "                         in the key's allow-list, if it has one\n"
	  TAGS_HELP("the key")
	  LIMIT_HELP
	  KEY_POLICY_HELP
	  "'none' clears a limit, e.g. '--rpm none'; 'inherit' a policy, e.g. '--audio\n"
	  "inherit'. Setting an unknown key fails.\n",
	  "NAME", OPT(OPT_TEAM) | OPT(OPT_MODELS) | OPT(OPT_DEFAULT_MODEL) | LIMIT_OPTS |
	  KEY_POLICY_OPTS | OPT(OPT_TAGS), 0, 0, keys_set },
	{ "key", "list", "key list [--json]",
	  LIST_HELP("API keys (never their hashes)")
	  "\n"
	  "TEAM is the key's team, \"-\" (JSON: null) for none. MODELS is the allow-list,\n"
	  "\"*\" (JSON: null) when the key may use every model.\n"
	  "An unset limit or policy shows as \"-\" (JSON: null); JSON has service_tiers and\n"
	  "tags as arrays. TAGS is \"-\" (JSON: null) for none. END_USERS is never unset.\n"
	  "BUDGET_USD is in dollars; JSON has budget_micros, integer micro-dollars.\n",
	  NULL, OPT(OPT_JSON), 0, 0, keys_list },
	{ "key", "revoke", "key revoke NAME",
	  "Revokes the key named NAME: the agent refuses it from its next reload on.\n"
	  "Revoking an unknown or already revoked key fails.\n",
	  "NAME", 0, 0, 0, keys_revoke },
	{ "team", "create", "team create NAME [--models M1,M2,...] " TEAM_SEE_SYNOPSIS " "
	  TAGS_SYNOPSIS " " LIMIT_SYNOPSIS,
	  "Creates the team NAME. A key joins it with 'key create --team' or 'key set\n"
	  "--team'; a request of a team's key is admitted only if the key and the team\n"
	  "both admit it: the team's limits count every request of its keys together.\n"
	  "\n"
	  "  NAME                   unique, 1-64 characters from A-Z a-z 0-9 . _ -, not none\n"
	  "  --models M1,M2,...     its keys may use only these models (each must exist),\n"
	  "                         on top of each key's own list; without it ('' or none\n"
	  "                         too) every model\n"
	  TEAM_SEE_HELP
	  TAGS_HELP("its keys")
	  LIMIT_HELP
	  "A limit not given is unset: no limit. --members-see-usage not given is no.\n"
	  "A team's tag wins over its key's of the same name.\n",
	  "NAME", OPT(OPT_MODELS) | OPT(OPT_MEMBERS_SEE_USAGE) | OPT(OPT_TAGS) | LIMIT_OPTS, 0, 0,
	  teams_create },
	{ "team", "set", "team set NAME [--models M1,M2,...] " TEAM_SEE_SYNOPSIS " " TAGS_SYNOPSIS
	  " " LIMIT_SYNOPSIS,
	  "Changes the team named NAME; options not given keep their value. At least one\n"
	  "option is required. The team keeps its id, its keys and its history. The\n"
	  "running agent applies the change at its next reload.\n"
	  "\n"
	  "  --models M1,M2,...     replace the allow-list (each model must exist);\n"
	  "                         '' or none: every model\n"
	  TEAM_SEE_HELP
	  TAGS_HELP("its keys")
	  LIMIT_HELP
	  "'none' clears a limit, e.g. '--rpm none'. Setting an unknown team fails.\n",
	  "NAME", OPT(OPT_MODELS) | OPT(OPT_MEMBERS_SEE_USAGE) | OPT(OPT_TAGS) | LIMIT_OPTS, 0, 0,
	  teams_set },
	{ "team", "list", "team list [--json]",
	  LIST_HELP("teams")
	  "\n"
	  "ACTIVE_KEYS counts the team's keys not revoked. MODELS is the allow-list, \"*\"\n"
	  "(JSON: null) when its keys may use every model. An unset limit shows as \"-\"\n"
	  "(JSON: null). BUDGET_USD is in dollars; JSON has budget_micros, integer\n"
	  "micro-dollars. MEMBERS_SEE_USAGE is yes when the team's keys may read its usage\n"
	  "(JSON: true or false). TAGS is \"-\" (JSON: null) for none; JSON has an array.\n",
	  NULL, OPT(OPT_JSON), 0, 0, teams_list },
	{ "team", "delete", "team delete NAME",
	  "Deletes the team named NAME and its allow-list. Refused while any key, revoked\n"
	  "or not, belongs to it: move them first with 'key set KEY --team OTHER|none'.\n"
	  "Usage rows and rollups keep the team's id.\n",
	  "NAME", 0, 0, 0, teams_delete },
	{ "tag", "set", "tag set TAG " BUDGET_SYNOPSIS,
	  "Sets the budget of TAG, one tag (name=value, e.g. env=prod), creating it or\n"
	  "changing what is given. A request carrying TAG is admitted only if the tag's\n"
	  "budget, spent by every key's requests carrying it, admits it too. Only keys that\n"
	  "fix TAG (key or team --tags) may carry it: others are refused 403. The running\n"
	  "agent applies the change at its next reload.\n"
	  "\n"
	  BUDGET_HELP("")
	  "\n"
	  "A tag without a budget needs --budget-usd. Only 'tag delete' removes a budget.\n",
	  "TAG", OPT(OPT_BUDGET_USD) | OPT(OPT_BUDGET_PERIOD), 0, 0, tagbudgets_set },
	{ "tag", "list", "tag list [--json]",
	  LIST_HELP("the budgets of tags")
	  "\n"
	  "BUDGET_USD and SPENT_USD are in dollars; JSON has budget_micros and spent_micros,\n"
	  "integer micro-dollars. SPENT_USD is what every key's requests carrying the tag\n"
	  "cost (reported and estimated) in the current period: since 00:00 UTC today\n"
	  "(day), since Monday 00:00 UTC (week), since the 1st of this month UTC (month),\n"
	  "or ever (total).\n",
	  NULL, OPT(OPT_JSON), 0, 0, tagbudgets_list },
	{ "tag", "delete", "tag delete TAG",
	  "Deletes the budget of TAG: requests carrying it are no longer held to one.\n"
	  "Deleting the budget of a tag that has none fails.\n",
	  "TAG", 0, 0, 0, tagbudgets_delete },
	{ "enduser", "set", "enduser set [USER] --key KEY|--team TEAM [--rpm N] [--tpm N] "
	  BUDGET_SYNOPSIS,
	  "Sets the limits of USER, an end user that the requests of key KEY name (the\n"
	  "X-Tally-User header, OpenAI's safety_identifier or user, Anthropic's\n"
	  "metadata.user_id), or with --team TEAM of each key of the team; without USER,\n"
	  "the default of every end user that has no limits of its own. Options not given\n"
	  "keep their value. An end user's limits are counted per key and end user, and\n"
	  "come from the key's row for it, else the team's, else the key's default, else\n"
	  "the team's: a row whose limits are all none exempts USER from a default. A\n"
	  "request is admitted only if its key, its team and its end user all admit it.\n"
	  "The running agent applies the change at its next reload.\n"
	  "\n"
	  "  USER                   1-256 bytes of UTF-8 without control characters, as\n"
	  "                         requests send it (give -- before one starting with -)\n"
	  "  --key KEY              the key (its name) whose end users these are, or\n"
	  "  --team TEAM            the team, for each of its keys\n"
	  "  --rpm N                requests per minute, 1-1000000000000, or none\n"
	  "  --tpm N                tokens per minute, 1-1000000000000, or none\n"
	  BUDGET_HELP(", or none"),
	  "[USER]", OPT(OPT_KEY) | OPT(OPT_TEAM) | OPT(OPT_RPM) | OPT(OPT_TPM) |
	  OPT(OPT_BUDGET_USD) | OPT(OPT_BUDGET_PERIOD), 0, 0, endusers_set },
	{ "enduser", "list", "enduser list [--key KEY|--team TEAM] [--json]",
	  LIST_HELP("end users' limits")
	  "  --key KEY    only those of key KEY\n"
	  "  --team TEAM  only those of team TEAM\n"
	  "\n"
	  "KEY or TEAM is the row's owner, the other \"-\" (JSON: null); END_USER is \"-\"\n"
	  "(JSON: null) for the default of every end user. BUDGET_USD is in dollars; JSON\n"
	  "has budget_micros, integer micro-dollars. What each end user spent is on GET\n"
	  "/tally/v1/usage/end_users and in queryd's reports.\n",
	  NULL, OPT(OPT_KEY) | OPT(OPT_TEAM) | OPT(OPT_JSON), 0, 0, endusers_list },
	{ "enduser", "delete", "enduser delete [USER] --key KEY|--team TEAM",
	  "Deletes the limits of USER (without USER: the default) of key KEY or team TEAM:\n"
	  "USER's requests fall back to the next row (the team's, then the defaults).\n"
	  "Deleting limits that do not exist fails.\n",
	  "[USER]", OPT(OPT_KEY) | OPT(OPT_TEAM), 0, 0, endusers_delete },
	{ "modelbudget", "set", "modelbudget set MODEL --key KEY|--team TEAM " BUDGET_SYNOPSIS,
	  "Sets the budget of key KEY, or with --team TEAM of the team's keys together, for\n"
	  "MODEL: what its requests routed to MODEL may spend per period. Spend on MODEL\n"
	  "counts against this budget and against the key's (team's) budget for every\n"
	  "model: a request is admitted only if both admit it, else refused 402\n"
	  "model_budget_exceeded (team_model_budget_exceeded). Options not given keep their\n"
	  "value. The running agent applies the change at its next reload.\n"
	  "\n"
	  "  MODEL                  a model (must exist: 'tallyctl model list')\n"
	  "  --key KEY              the key (its name) whose budget this is, or\n"
	  "  --team TEAM            the team, for all of its keys together\n"
	  BUDGET_HELP("")
	  "\n"
	  "A new budget needs --budget-usd. Only 'modelbudget delete' removes a budget.\n",
	  "MODEL", OPT(OPT_KEY) | OPT(OPT_TEAM) | OPT(OPT_BUDGET_USD) | OPT(OPT_BUDGET_PERIOD), 0,
	  0, modelbudgets_set },
	{ "modelbudget", "list", "modelbudget list [--key KEY|--team TEAM] [--json]",
	  LIST_HELP("budgets per model")
	  "  --key KEY    only those of key KEY\n"
	  "  --team TEAM  only those of team TEAM\n"
	  "\n"
	  "KEY or TEAM is the budget's owner, the other \"-\" (JSON: null). BUDGET_USD is in\n"
	  "dollars; JSON has budget_micros, integer micro-dollars.\n",
	  NULL, OPT(OPT_KEY) | OPT(OPT_TEAM) | OPT(OPT_JSON), 0, 0, modelbudgets_list },
	{ "modelbudget", "delete", "modelbudget delete MODEL --key KEY|--team TEAM",
	  "Deletes the budget of key KEY or team TEAM for MODEL: spend on MODEL is then held\n"
	  "to the key's (team's) budget for every model alone. Deleting a budget that does\n"
	  "not exist fails.\n",
	  "MODEL", OPT(OPT_KEY) | OPT(OPT_TEAM), 0, 0, modelbudgets_delete },
	{ "model", "set",
	  "model set NAME --provider PROVIDER [--input-micros N] [--output-micros N] "
	  "[--cached-micros N] [--cache-write-micros N] [--max-output N]",
	  "Creates the model NAME (as clients spell it in requests) or updates it. The\n"
	  "prices go to its default rate card for every prompt size (tier default, above\n"
	  "0 tokens); 'tallyctl prices' manages every card and price. Prices are integer\n"
	  "micro-dollars per million tokens (1000000 = $1 per Mtok), from 0 to\n"
	  "1000000000000. A price not given is unknown (unset) on a new card and unchanged\n"
	  "on an existing one; a model given no price has no card. Usage of a model\n"
	  "without the prices it needs is recorded unpriced, never at a guessed price.\n"
	  "\n"
	  "  --provider PROVIDER      provider serving the model (must exist)\n"
	  "  --input-micros N         price of prompt tokens\n"
	  "  --output-micros N        price of completion tokens\n"
	  "  --cached-micros N        price of prompt tokens read from the provider's cache\n"
	  "  --cache-write-micros N   price of prompt tokens written to the provider's cache\n"
	  "                           (5-minute lifetime)\n"
	  "  --max-output N           the most output tokens it gives one answer: what a\n"
	  "                           request naming no bound is estimated at (unchanged\n"
	  "                           when not given; none: the agent's --default-max-tokens)\n",
	  "NAME", OPT(OPT_PROVIDER) | MODEL_PRICE_OPTS | OPT(OPT_MAX_OUTPUT), OPT(OPT_PROVIDER), 0,
	  models_set },
	{ "model", "list", "model list [--json]",
	  LIST_HELP("models with their provider and prices")
	  "\n"
	  "The prices are those of the default card for every prompt size, as model set\n"
	  "writes them; an unset price shows as \"-\" (JSON: null). CARDS (JSON:\n"
	  "price_cards) counts the model's rate cards: 'tallyctl prices list' shows them.\n",
	  NULL, OPT(OPT_JSON), 0, 0, models_list },
	{ "prices", "set", "prices set MODEL [--tier TIER] [--above TOKENS] " CARD_PRICE_SYNOPSIS,
	  "Creates or updates a rate card of MODEL: the prices of requests served at TIER\n"
	  "whose prompt is above TOKENS tokens (the card with the largest such TOKENS\n"
	  "applies). Prices not given stay unknown on a new card, unchanged on an existing\n"
	  "one. At least one price is required.\n"
	  "\n"
	  "  --tier TIER     service tier the provider reports, 1-23 characters from\n"
	  "                  a-z 0-9 _ - (default: default, also when none is reported)\n"
	  "  --above TOKENS  prompt size the card starts above, 0-1000000000000 (default 0)\n"
	  CARD_PRICE_HELP,
	  "MODEL", OPT(OPT_TIER) | OPT(OPT_ABOVE) | CARD_PRICE_OPTS, 0, 0, prices_set },
	{ "prices", "list", "prices list [MODEL] [--json]",
	  "Lists the rate cards of every model, or of MODEL, one per line; an unknown\n"
	  "price shows as \"-\". Prices are micro-dollars per million tokens, WEB_SEARCH\n"
	  "per call. With --json, prints the tally import format (docs/tallyctl.md),\n"
	  "{\"models\": {\"NAME\": [card, ...]}}, which 'prices import' reads back.\n"
	  "\n"
	  "  --json  print JSON\n",
	  "[MODEL]", OPT(OPT_JSON), 0, 0, prices_list },
	{ "prices", "delete", "prices delete MODEL --tier TIER --above TOKENS",
	  "Deletes the rate card (TIER, TOKENS) of MODEL: requests it priced are then\n"
	  "priced by the card below it, or stored unpriced. Deleting a card that does not\n"
	  "exist fails.\n",
	  "MODEL", OPT(OPT_TIER) | OPT(OPT_ABOVE), OPT(OPT_TIER) | OPT(OPT_ABOVE), 0,
	  prices_delete },
	{ "prices", "import",
	  "prices import FILE [--format tally|litellm] [--dry-run] [--verbose] [--json]",
	  "Writes the rate cards FILE holds for the models configured here, in one\n"
	  "transaction: all of them or, on any error, none. Each card in FILE replaces\n"
	  "the card of the same tier and prompt size whole; other cards are kept. Models\n"
	  "in FILE not configured here are counted, never created. Prints a report: models\n"
	  "priced, cards written, names matched after a provider prefix, and every price\n"
	  "field it could not map with the number of models carrying it.\n"
	  "\n"
	  "  --format tally    FILE as 'prices list --json' prints it (the default)\n"
	  "  --format litellm  LiteLLM's model_prices_and_context_window.json, dollars per\n"
	  "                    token converted exactly (docs/tallyctl.md has the mapping)\n"
	  "  --dry-run         report, write nothing\n"
	  "  --verbose         also list the models not configured, or not in FILE\n"
	  "  --json            print the report as JSON, every list in full\n",
	  "FILE", OPT(OPT_FORMAT) | OPT(OPT_DRY_RUN) | OPT(OPT_VERBOSE) | OPT(OPT_JSON), 0, 0,
	  priceimport_run },
	{ "provider", "set", "provider set NAME --api openai|anthropic --backend BACKEND [--url URL]",
	  "Creates the provider NAME or updates it. Credentials are not stored: HAProxy\n"
	  "adds them from its environment.\n"
	  "\n"
	  "  --api openai|anthropic  wire protocol the provider speaks\n"
	  "  --backend BACKEND       HAProxy backend that serves it\n"
	  "  --url URL               base URL, informational; '' clears it; kept if absent\n",
	  "NAME", OPT(OPT_API) | OPT(OPT_BACKEND) | OPT(OPT_URL), OPT(OPT_API) | OPT(OPT_BACKEND), 0,
	  providers_set },
	{ "provider", "list", "provider list [--json]",
	  LIST_HELP("providers"),
	  NULL, OPT(OPT_JSON), 0, 0, providers_list },
	{ "gateway-secret", NULL, "gateway-secret",
	  "Prints the gateway secret the agent expects HAProxy to send (TALLY_GATEWAY_SECRET\n"
	  "in HAProxy's environment): with every decision request and every record, by\n"
	  "which the agent refuses what any other process sends its ports. Unless\n"
	  "TALLY_GATEWAY_SECRET is set for the agent (then printed as is), it is derived\n"
	  "from the key-hashing secret, which is created if missing.\n",
	  NULL, 0, 0, 0, keys_gateway_secret },
	{ "backup", NULL, "backup DEST",
	  "Copies the database to DEST, consistently, while the agent keeps writing (one\n"
	  "read snapshot: VACUUM INTO). DEST must not exist; it appears only once complete,\n"
	  "synced and passing PRAGMA integrity_check. The copy is compact and has no -wal\n"
	  "file. The key-hashing secret file is not copied: back it up separately, once.\n"
	  "Never creates or migrates the database. SQLite only: back a PostgreSQL store up\n"
	  "with pg_dump.\n",
	  "DEST", 0, 0, 0, maintenance_backup },
	{ "prune", NULL, "prune --older-than-days N [--batch ROWS] [--pause-ms MS] [--dry-run]",
	  "Deletes raw usage rows (the requests table) that started more than N days ago,\n"
	  "in batches of ROWS, each its own short write transaction, pausing MS between\n"
	  "batches, so the running agent's writer is never held up for long. Rollups\n"
	  "(usage_*, model_*) and the accounting counters are kept. Safe to\n"
	  "interrupt and run again. The file does not shrink: freed pages are reused.\n"
	  "\n"
	  "  --older-than-days N  1-36500\n"
	  "  --batch ROWS         rows per transaction, 1-100000 (default 1000)\n"
	  "  --pause-ms MS        pause between batches, 0-60000 (default 50)\n"
	  "  --dry-run            only count the rows that would go\n",
	  NULL, OPT(OPT_OLDER_THAN_DAYS) | OPT(OPT_BATCH) | OPT(OPT_PAUSE_MS) | OPT(OPT_DRY_RUN),
	  OPT(OPT_OLDER_THAN_DAYS), 0, maintenance_prune },
};

#define CTL_NCOMMANDS (sizeof(tallyctl_commands) / sizeof(tallyctl_commands[0]))

/* Synopses of every command of group, or of all commands when group is NULL. */
static void tallyctl_print_synopses(const char *group)
{
	size_t i;

	for (i = 0; i < CTL_NCOMMANDS; i++) {
		if (!group || strcmp(group, tallyctl_commands[i].group) == 0)
			printf("  tallyctl [OPTIONS] %s\n", tallyctl_commands[i].synopsis);
	}
}

static void tallyctl_help_main(void)
{
	printf("usage: tallyctl [OPTIONS] COMMAND [ARGS]\n"
	       "\n"
	       "Manages the API keys, teams, tag budgets, models, prices and providers of the\n"
	       "tally gateway, and backs up and prunes its database. The first key, team, tag,\n"
	       "model, prices or provider command creates the database; the running agent\n"
	       "picks every change up.\n"
	       "\n"
	       "Options:\n"
	       "  --db STORE     database: a SQLite file path or a postgresql:// URL\n"
	       "                 (default: $TALLY_DB, else %s)\n"
	       "  --secret PATH  key-hashing secret (default: $TALLY_SECRET_FILE, else the\n"
	       "                 database path + \".secret\"; required with a URL)\n"
	       "  -h, --help     this help\n"
	       "\n"
	       "Commands:\n", CTL_DEFAULT_DB);
	tallyctl_print_synopses(NULL);
	printf("\n"
	       "'tallyctl COMMAND --help' (e.g. 'tallyctl key create --help') explains one.\n"
	       "Exit status: 0 success, 1 failure (database, unknown name), 2 usage error.\n");
}

static const struct ctl_command *tallyctl_command_find(const char *group, const char *verb)
{
	size_t i;

	for (i = 0; i < CTL_NCOMMANDS; i++) {
		if (strcmp(tallyctl_commands[i].group, group) == 0 &&
		    (!verb || (tallyctl_commands[i].verb && strcmp(tallyctl_commands[i].verb, verb) == 0)))
			return &tallyctl_commands[i];
	}
	return NULL;
}

/* Parses global options and the command words, then runs the command. */
static int tallyctl_main(struct ctl *ctl, int argc, char **argv)
{
	struct ctl_args args = { 0 };
	const char *group, *verb;
	int i, rc;

	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			tallyctl_help_main();
			return CTL_HELP;
		}
		rc = args_global_opt("db", argc, argv, &i, &ctl->db_path);
		if (rc == 0)
			rc = args_global_opt("secret", argc, argv, &i, &ctl->secret_path);
		if (rc == 0)
			return ctl_usage(NULL, "unknown option '%s'", argv[i]);
		if (rc != 1)
			return rc;
	}
	if (i == argc)
		return ctl_usage(NULL, "missing command");
	group = argv[i++];
	ctl->cmd = tallyctl_command_find(group, NULL);
	if (!ctl->cmd)
		return ctl_usage(NULL, "unknown command '%s'", group);
	if (!ctl->cmd->verb) {   /* one-word command: the rest are its arguments */
		rc = args_parse(ctl->cmd, argc - i, argv + i, &args);
		return rc == CTL_OK ? ctl->cmd->run(ctl, &args) : rc;
	}
	verb = i < argc ? argv[i++] : NULL;
	if (verb && (strcmp(verb, "-h") == 0 || strcmp(verb, "--help") == 0)) {
		printf("usage:\n");
		tallyctl_print_synopses(group);
		printf("\n'tallyctl %s SUBCOMMAND --help' explains one.\n", group);
		return CTL_HELP;
	}
	if (!verb)
		return ctl_usage(NULL, "missing subcommand after '%s'", group);
	ctl->cmd = tallyctl_command_find(group, verb);
	if (!ctl->cmd)
		return ctl_usage(NULL, "unknown command '%s %s'", group, verb);
	rc = args_parse(ctl->cmd, argc - i, argv + i, &args);
	return rc == CTL_OK ? ctl->cmd->run(ctl, &args) : rc;
}

int main(int argc, char **argv)
{
	struct ctl ctl = { 0 };
	const char *env;
	int status;

	env = getenv("TALLY_DB");
	ctl.db_path = env && *env ? env : CTL_DEFAULT_DB;
	env = getenv("TALLY_SECRET_FILE");
	ctl.secret_path = env && *env ? env : NULL;

	status = tallyctl_main(&ctl, argc, argv);
	if (status == CTL_HELP)
		status = CTL_OK;
	db_close(ctl.db);
	if (fflush(stdout) != 0 && status == CTL_OK)
		status = ctl_error("cannot write to stdout");
	return status;
}
