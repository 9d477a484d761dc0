/* selfcheck: tally-agent --self-check. Checks what a start needs, without starting and
 * without writing anything: the configuration (parsed by config.c as for a start), the
 * database at this binary's schema (preflight.c, read only), the key-hashing secret
 * (keyhash's own loading checks), the gateway secret, the journal directory, that
 * every listener can bind (bound and closed at once; a unix socket's path is examined,
 * never created or replaced), and, with --haproxy-cfg, that HAProxy's configuration
 * sends decisions to the SPOP address and records to the records address. One line
 * per check and a summary (preflight.h). Main thread, instead of a start. HAProxy's
 * configuration is read by haproxycfg.c (pure, unit-tested). */
#ifndef TALLY_SELFCHECK_H
#define TALLY_SELFCHECK_H

#include <stdio.h>

#include "config.h"

/* Runs every check and prints its line to out, then the summary. cfg is what a start
 * would use; config_error is NULL, or why the configuration did not parse (cfg is then
 * unused and that is the only check reported). Returns the exit status: 0 when every
 * check passed, else 1. */
int selfcheck_agent(FILE *out, const struct agent_config *cfg, const char *config_error);

#endif
