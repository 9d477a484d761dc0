/* config: the agent's settings, from an optional file and command-line flags (flags
 * win), and the run mode (--self-check). Parsed once by the main thread before any
 * other thread starts. */
#ifndef TALLY_CONFIG_H
#define TALLY_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "keytable-t.h"
#include "log.h"

#define CONFIG_MAX_LISTEN  8
#define CONFIG_MAX_THREADS 64
#define CONFIG_PATH_MAX    1024
#define CONFIG_NODE_MAX    64

struct agent_config {
	char listen[CONFIG_MAX_LISTEN][CONFIG_PATH_MAX]; /* "host:port" or "unix:/path" */
	int nlisten;
	int threads;
	char db_path[CONFIG_PATH_MAX];         /* a SQLite path or a postgresql:// URL */
	char node[CONFIG_NODE_MAX];            /* this agent's accounting row in the store */
	char secret_path[CONFIG_PATH_MAX];     /* empty: db_path + ".secret" (SQLite only) */
	enum log_level log_level;
	uint32_t max_frame_size;
	int reload_interval_ms;
	int lease_interval_ms;                 /* shared limits (PostgreSQL): share.h */
	int lease_ttl_ms;
	int lease_hold_ms;
	int lease_wait_ms;
	int max_connections;
	int max_unauthenticated;               /* SPOP connections before the secret */
	unsigned unix_mode;                    /* of the unix sockets: net_set_unix_mode */
	int auth_timeout_ms;
	int idle_timeout_ms;
	/* Accounting */
	char records_addr[CONFIG_PATH_MAX];    /* TCP + UDP, HAProxy's log records */
	char metrics_addr[CONFIG_PATH_MAX];    /* "": no metrics listener */
	char control_path[CONFIG_PATH_MAX];    /* empty: db_path + ".ctl" */
	char journal_dir[CONFIG_PATH_MAX];     /* empty: db_path + ".journal" */
	int queue_capacity;
	int batch_max;
	int write_retry_ms;
	int spill_max_mb;                     /* rows waiting on disk for the store, at most */
	int pending_timeout_ms;
	int pending_max;
	int long_body_memory;                 /* bytes of long bodies in assembly, at most */
	int long_body_key_memory;             /* of those, one key's at most */
	int max_body;                         /* request body bytes, at most; 0 no cap */
	int stored_responses;                 /* stored responses' owners kept, at most */
	int dedupe_ms;
	int default_max_tokens;
	/* What a key whose own columns are NULL may ask for that costs more
	 * (docs/pricing.md): tiers comma-separated ("" every tier priced). */
	char service_tiers[CONFIG_PATH_MAX];
	enum kt_policy server_tools;
	enum kt_policy audio;
	enum kt_policy cache_writes;
	int64_t db_max_pages;
	char haproxy_socket[CONFIG_PATH_MAX];  /* HAProxy's CLI; empty: the ring's backlog is
	                                        * not read (intake.h) */
	char haproxy_ring[CONFIG_PATH_MAX];    /* the records ring's name in tally.cfg */
	/* Self-check (spoa/selfcheck.h) */
	char haproxy_cfg[CONFIG_PATH_MAX];     /* empty: HAProxy's configuration is not checked */
	char config_file[CONFIG_PATH_MAX];     /* what --config named; empty: none */
	int self_check;                        /* --self-check: check, never start */
};

enum config_result { CONFIG_OK, CONFIG_EXIT_OK, CONFIG_ERROR };

/* Fills cfg from argv (and the file named by --config). CONFIG_EXIT_OK after --help
 * (printed to stdout); CONFIG_ERROR with the problem, one line, in err. cfg->self_check
 * is set whenever --self-check was given, even when CONFIG_ERROR is returned. */
enum config_result config_parse(struct agent_config *cfg, int argc, char **argv, char *err,
                                size_t errlen);

#endif
