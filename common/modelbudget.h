/* modelbudget: the bound on a key's or a team's budgets per model (model_budgets;
 * docs/limits.md, "Budgets per model"), which tallyctl enforces and the agent relies on:
 * GET /tally/v1/usage lists them all in one answer of the agent's frame. */
#ifndef TALLY_MODELBUDGET_H
#define TALLY_MODELBUDGET_H

#define MODELBUDGET_PER_OWNER_MAX 16

#endif
