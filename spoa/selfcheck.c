/* selfcheck: tally-agent --self-check (see selfcheck.h). Main thread, run instead of a
 * start: no other thread exists. Runs the checks, touching files and sockets only to
 * look; HAProxy's configuration is read by haproxycfg.c. */
#include "selfcheck.h"

#include <errno.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "db.h"
#include "gwsecret.h"
#include "haproxycfg.h"
#include "keyhash.h"
#include "net.h"
#include "preflight.h"

#define SELFCHECK_FILE_MAX  (8 << 20)   /* a configuration file read whole, at most */

/* Copies src into dst[cap], cut to fit. */
static void selfcheck_copy(char *dst, size_t cap, const char *src)
{
	size_t n = strnlen(src, cap - 1);

	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* ---- the checks ---- */

#define SELFCHECK_MAX_FDS (CONFIG_MAX_LISTEN + 4)

struct selfcheck {
	struct preflight p;
	const struct agent_config *cfg;
	int fds[SELFCHECK_MAX_FDS];   /* bound listeners, closed together at the end so that
	                               * two of the agent's own addresses that collide show */
	int nfds;
};

static const char *selfcheck_getenv(void *arg, const char *name)
{
	(void)arg;
	return getenv(name);
}

static const struct haproxycfg_env selfcheck_environ = { selfcheck_getenv, NULL };

/* A TCP listener (udp 0) or UDP socket (udp 1) on host:port: bound, kept until the end.
 * UDP is bound without SO_REUSEADDR: a start would share the port with whoever holds
 * it (a running agent) and its records with it, so here that counts as in use. */
static void selfcheck_inet(struct selfcheck *sc, const char *what, const char *addr, int udp)
{
	char err[512];
	int fd = udp ? net_probe_udp(addr, err, sizeof(err)) : net_listen(addr, err, sizeof(err));

	if (fd < 0) {
		preflight_report(&sc->p, 0, "%s: %s", what, err);
		return;
	}
	if (sc->nfds < SELFCHECK_MAX_FDS)
		sc->fds[sc->nfds++] = fd;
	else
		close(fd);
	preflight_report(&sc->p, 1, "%s %s: can %s", what, addr, udp ? "bind" : "listen");
}

/* A unix socket the agent would listen on: never created or replaced here. A stale
 * socket (nothing answers) is what a start replaces; one that answers is in use. */
static void selfcheck_unix(struct selfcheck *sc, const char *what, const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char copy[CONFIG_PATH_MAX];
	const char *dir;
	struct stat st;
	int fd, rc;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		preflight_report(&sc->p, 0, "%s %s: path too long for a unix socket (%zu bytes at "
		                 "most)", what, path, sizeof(sa.sun_path) - 1);
		return;
	}
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			preflight_report(&sc->p, 0, "%s %s: exists and is not a socket (a start "
			                 "refuses to replace it)", what, path);
			return;
		}
		strcpy(sa.sun_path, path);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		rc = fd < 0 ? -1 : connect(fd, (struct sockaddr *)&sa, sizeof(sa));
		if (rc == 0 || errno == EAGAIN || errno == EINPROGRESS)
			preflight_report(&sc->p, 0, "%s %s: in use (a process listens there: an agent "
			                 "already running?)", what, path);
		else if (errno == ECONNREFUSED)
			preflight_report(&sc->p, 1, "%s %s: stale socket, a start replaces it", what,
			                 path);
		else
			preflight_report(&sc->p, 0, "%s %s: %s", what, path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return;
	}
	if (errno != ENOENT) {
		preflight_report(&sc->p, 0, "%s %s: %s", what, path, strerror(errno));
		return;
	}
	selfcheck_copy(copy, sizeof(copy), path);
	dir = dirname(copy);
	if (access(dir, W_OK | X_OK) < 0)
		preflight_report(&sc->p, 0, "%s %s: cannot create a socket in %s: %s", what, path,
		                 dir, strerror(errno));
	else
		preflight_report(&sc->p, 1, "%s %s: can be created", what, path);
}

static void selfcheck_listener(struct selfcheck *sc, const char *what, const char *addr)
{
	if (strncmp(addr, "unix:", 5) == 0)
		selfcheck_unix(sc, what, addr + 5);
	else
		selfcheck_inet(sc, what, addr, 0);
}

static void selfcheck_listeners(struct selfcheck *sc)
{
	const struct agent_config *cfg = sc->cfg;
	int i;

	for (i = 0; i < cfg->nlisten; i++)
		selfcheck_listener(sc, "SPOP listener", cfg->listen[i]);
	/* The records address must be host:port: UDP has no unix form here. */
	if (strncmp(cfg->records_addr, "unix:", 5) != 0)
		selfcheck_inet(sc, "records listener (TCP)", cfg->records_addr, 0);
	selfcheck_inet(sc, "records listener (UDP)", cfg->records_addr, 1);
	if (!cfg->metrics_addr[0])
		preflight_report(&sc->p, 1, "metrics listener: off");
	else if (strncmp(cfg->metrics_addr, "unix:", 5) == 0)
		preflight_report(&sc->p, 0, "metrics listener: must be host:port, not %s",
		                 cfg->metrics_addr);
	else
		selfcheck_inet(sc, "metrics listener", cfg->metrics_addr, 0);
	selfcheck_unix(sc, "control socket", cfg->control_path);
	while (sc->nfds > 0)
		close(sc->fds[--sc->nfds]);
}

/* The journal directory: there and writable, or creatable (a start makes it). */
static void selfcheck_journal(struct selfcheck *sc)
{
	const char *dir = sc->cfg->journal_dir, *parent;
	char copy[CONFIG_PATH_MAX];
	struct stat st;

	if (stat(dir, &st) == 0) {
		if (!S_ISDIR(st.st_mode))
			preflight_report(&sc->p, 0, "journal %s: not a directory", dir);
		else if (access(dir, W_OK | X_OK) < 0)
			preflight_report(&sc->p, 0, "journal %s: %s", dir, strerror(errno));
		else
			preflight_report(&sc->p, 1, "journal %s: writable", dir);
		return;
	}
	if (errno != ENOENT) {
		preflight_report(&sc->p, 0, "journal %s: %s", dir, strerror(errno));
		return;
	}
	selfcheck_copy(copy, sizeof(copy), dir);
	parent = dirname(copy);
	if (access(parent, W_OK | X_OK) < 0)
		preflight_report(&sc->p, 0, "journal %s: cannot be created in %s: %s", dir, parent,
		                 strerror(errno));
	else
		preflight_report(&sc->p, 1, "journal %s: absent, a start creates it", dir);
}

/* The key-hashing secret, by keyhash's own loading rules (never created here), then the
 * gateway secret: TALLY_GATEWAY_SECRET's, or the one derived from it. */
static void selfcheck_secrets(struct selfcheck *sc)
{
	const struct agent_config *cfg = sc->cfg;
	unsigned char secret[KEYHASH_SECRET_LEN];
	char path[CONFIG_PATH_MAX + 16], err[CONFIG_PATH_MAX + 256];
	struct gwsecret gw;
	struct stat st;
	int secret_ok = 0, from_env;

	if (keyhash_secret_path(cfg->secret_path, cfg->db_path, path, sizeof(path)) < 0)
		path[0] = '\0';
	if (!path[0])
		preflight_report(&sc->p, 0, "key-hashing secret: database path too long");
	else if (keyhash_secret_load(path, 0, secret, err, sizeof(err)) < 0)
		preflight_report(&sc->p, 0, "key-hashing secret: %s%s", err,
		                 !(lstat(path, &st) < 0 && errno == ENOENT) ? "" :
		                 db_is_postgres(cfg->db_path) ?
		                 " (a start on PostgreSQL refuses: copy the file every node and "
		                 "tallyctl share)" :
		                 " (a start would create a new one, and keys made under another "
		                 "would no longer match)");
	else
		secret_ok = preflight_report(&sc->p, 1, "key-hashing secret %s: private, %d bytes",
		                             path, KEYHASH_SECRET_LEN) == 0;
	from_env = gwsecret_from_env(&gw, err, sizeof(err));
	if (from_env < 0) {
		preflight_report(&sc->p, 0, "gateway secret (%s): %s", GWSECRET_ENV, err);
	} else if (from_env > 0) {
		preflight_report(&sc->p, 1, "gateway secret: from %s", GWSECRET_ENV);
	} else if (secret_ok) {
		preflight_report(&sc->p, 1, "gateway secret: derived from the key-hashing secret "
		                 "(tallyctl gateway-secret prints it for HAProxy)");
	} else {
		preflight_report(&sc->p, 0, "gateway secret: %s is not set and the key-hashing "
		                 "secret it would be derived from did not load", GWSECRET_ENV);
	}
	explicit_bzero(secret, sizeof(secret));
	explicit_bzero(&gw, sizeof(gw));
}

/* Reads a file whole (at most SELFCHECK_FILE_MAX). NULL with err. */
static char *selfcheck_read(const char *path, size_t *len, char *err, size_t errlen)
{
	FILE *f = fopen(path, "re");
	size_t cap = 65536, n = 0;
	char *buf = NULL, *bigger;

	if (!f) {
		snprintf(err, errlen, "%s", strerror(errno));
		return NULL;
	}
	for (;;) {
		if (!(bigger = realloc(buf, cap + 1))) {
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
		buf = bigger;
		n += fread(buf + n, 1, cap - n, f);
		if (ferror(f)) {
			snprintf(err, errlen, "read error");
			goto fail;
		}
		if (n < cap)
			break;
		if (cap >= SELFCHECK_FILE_MAX) {
			snprintf(err, errlen, "larger than %d MiB", SELFCHECK_FILE_MAX >> 20);
			goto fail;
		}
		cap *= 2;
	}
	fclose(f);
	buf[n] = '\0';
	*len = n;
	return buf;
fail:
	fclose(f);
	free(buf);
	return NULL;
}

/* An SPOE configuration named by a filter line: as given, else beside tally.cfg
 * (HAProxy reads a relative path from its own working directory). */
static char *selfcheck_read_spoe(const char *cfg_path, const char *spoe, char *used, size_t cap,
                                 size_t *len, char *err, size_t errlen)
{
	char dir[CONFIG_PATH_MAX], *text;

	selfcheck_copy(used, cap, spoe);
	if ((text = selfcheck_read(spoe, len, err, errlen)) || spoe[0] == '/')
		return text;
	selfcheck_copy(dir, sizeof(dir), cfg_path);
	snprintf(used, cap, "%s/%s", dirname(dir), spoe);   /* dirname's result, then copied */
	if ((text = selfcheck_read(used, len, err, errlen)))
		return text;
	selfcheck_copy(used, cap, spoe);
	return NULL;
}

/* " (NAME is not set here: ...)" when a looked-at line named an unset variable. */
static const char *selfcheck_unset_hint(const char *unset, char *buf, size_t cap)
{
	if (!unset[0])
		return "";
	snprintf(buf, cap, " (%s is not set here: run the check with HAProxy's environment)",
	         unset);
	return buf;
}

/* Joins the agent's SPOP addresses with " or ". */
static void selfcheck_spop_list(const struct agent_config *cfg, char *buf, size_t cap)
{
	size_t used = 0;
	int i;

	buf[0] = '\0';
	for (i = 0; i < cfg->nlisten && used < cap; i++)
		used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? " or " : "",
		                         cfg->listen[i]);
}

/* Looks for any of the SPOP addresses in backend (NULL: any). 1, 0, -1. */
static int selfcheck_spop_in(const struct agent_config *cfg, const char *text, size_t len,
                             const char *backend, struct haproxycfg_found *f, char *addr,
                             size_t cap)
{
	struct haproxycfg_found miss;
	int i, rc;

	memset(&miss, 0, sizeof(miss));
	for (i = 0; i < cfg->nlisten; i++) {
		rc = haproxycfg_find(text, len, HAPROXYCFG_SERVER, cfg->listen[i], backend,
		                     &selfcheck_environ, f);
		if (rc != 0) {
			selfcheck_copy(addr, cap, cfg->listen[i]);
			return rc;
		}
		if (i == 0)
			miss = *f;
	}
	*f = miss;
	return 0;
}

/* The SPOP address, in the backend that the use-backend of the SPOE configuration of
 * a filter spoe line names (spoe[0..n)). */
static void selfcheck_hap_spop(struct selfcheck *sc, const char *path, const char *text,
                               size_t len, const struct haproxycfg_spoe *spoe, int n)
{
	struct haproxycfg_found f;
	char err[512], backend[128] = "", from[CONFIG_PATH_MAX + 64] = "", addrs[512], addr[256];
	char hint[160], why[2 * CONFIG_PATH_MAX + 1024] = "";
	int i, rc = 0;

	memset(&f, 0, sizeof(f));
	if (n == 0) {
		preflight_report(&sc->p, 0, "%s: no 'filter spoe' line: HAProxy never asks the agent",
		                 path);
		return;
	}
	selfcheck_spop_list(sc->cfg, addrs, sizeof(addrs));
	for (i = 0; i < n && rc == 0; i++) {
		char used[CONFIG_PATH_MAX + 8], *spoe_text;
		size_t spoe_len;
		int brc;

		if (!spoe[i].config[0]) {
			snprintf(why, sizeof(why), "line %d's filter spoe names no config file",
			         spoe[i].line);
			continue;
		}
		spoe_text = selfcheck_read_spoe(path, spoe[i].config, used, sizeof(used), &spoe_len,
		                                err, sizeof(err));
		if (!spoe_text) {
			snprintf(why, sizeof(why), "cannot read %s: %s", used[0] ? used : "''", err);
			continue;
		}
		brc = haproxycfg_spoe_backend(spoe_text, spoe_len, spoe[i].engine, &selfcheck_environ,
		                              backend, sizeof(backend), err, sizeof(err));
		free(spoe_text);
		if (brc <= 0) {
			snprintf(why, sizeof(why), "%s: %s", used, brc < 0 ? err :
			         "no use-backend in its spoe-agent");
			continue;
		}
		snprintf(from, sizeof(from), "use-backend of %s", used);
		rc = selfcheck_spop_in(sc->cfg, text, len, backend, &f, addr, sizeof(addr));
	}
	if (rc < 0) {
		preflight_report(&sc->p, 0, "%s: %s", path, f.err);
	} else if (rc > 0) {
		preflight_report(&sc->p, 1, "%s: SPOP address %s is server %s of backend %s (%s, line "
		                 "%d)", path, addr, f.server, f.section, from, f.line);
	} else if (from[0]) {
		/* The last SPOE configuration read named a backend, and it lacks the agent. */
		if (!f.section_seen)
			preflight_report(&sc->p, 0, "%s: no backend %s (%s)", path, backend, from);
		else
			preflight_report(&sc->p, 0, "%s: backend %s (%s) has no server at %s (its "
			                 "servers: %s)%s", path, backend, from, addrs,
			                 f.others[0] ? f.others : "none",
			                 selfcheck_unset_hint(f.unset, hint, sizeof(hint)));
	} else {
		/* No SPOE configuration could be read here: any backend will do. */
		rc = selfcheck_spop_in(sc->cfg, text, len, NULL, &f, addr, sizeof(addr));
		if (rc < 0)
			preflight_report(&sc->p, 0, "%s: %s", path, f.err);
		else if (rc > 0)
			preflight_report(&sc->p, 1, "%s: SPOP address %s is server %s of backend %s "
			                 "(line %d; every backend searched: %s)", path, addr, f.server,
			                 f.section, f.line, why);
		else
			preflight_report(&sc->p, 0, "%s: no backend has a server at %s (servers: %s; %s)%s",
			                 path, addrs, f.others[0] ? f.others : "none", why,
			                 selfcheck_unset_hint(f.unset, hint, sizeof(hint)));
	}
}

/* The records address: a ring's server (TCP, used by a log line), and a log target. */
static void selfcheck_hap_records(struct selfcheck *sc, const char *path, const char *text,
                                  size_t len)
{
	const char *addr = sc->cfg->records_addr;
	struct haproxycfg_found f;
	char hint[160];
	int rc;

	rc = haproxycfg_find(text, len, HAPROXYCFG_RING, addr, NULL, &selfcheck_environ, &f);
	if (rc < 0)
		preflight_report(&sc->p, 0, "%s: %s", path, f.err);
	else if (rc == 0)
		preflight_report(&sc->p, 0, "%s: records address %s is on no ring's server line (ring "
		                 "servers: %s)%s", path, addr, f.others[0] ? f.others : "none",
		                 selfcheck_unset_hint(f.unset, hint, sizeof(hint)));
	else if (!f.ring_used)
		preflight_report(&sc->p, 0, "%s: ring %s sends to records address %s (line %d) but no "
		                 "log line uses ring@%s", path, f.section, addr, f.line, f.section);
	else
		preflight_report(&sc->p, 1, "%s: records address %s is the server of ring %s (line %d),"
		                 " which a log line uses", path, addr, f.section, f.line);
	rc = haproxycfg_find(text, len, HAPROXYCFG_LOG, addr, NULL, &selfcheck_environ, &f);
	if (rc < 0)
		preflight_report(&sc->p, 0, "%s: %s", path, f.err);
	else if (rc == 0)
		preflight_report(&sc->p, 0, "%s: records address %s is on no log line (log targets: "
		                 "%s)%s", path, addr, f.others[0] ? f.others : "none",
		                 selfcheck_unset_hint(f.unset, hint, sizeof(hint)));
	else
		preflight_report(&sc->p, 1, "%s: records address %s is a log target (line %d)", path,
		                 addr, f.line);
}

static void selfcheck_haproxy(struct selfcheck *sc)
{
	const char *path = sc->cfg->haproxy_cfg;
	struct haproxycfg_spoe spoe[4];
	char err[512], *text;
	size_t len;
	int n;

	if (!path[0])
		return;
	if (!(text = selfcheck_read(path, &len, err, sizeof(err)))) {
		preflight_report(&sc->p, 0, "HAProxy configuration %s: %s", path, err);
		return;
	}
	/* This reads the whole file: a line HAProxy would refuse is reported once. */
	n = haproxycfg_spoe_filters(text, len, &selfcheck_environ, spoe, 4, err, sizeof(err));
	if (n < 0) {
		preflight_report(&sc->p, 0, "HAProxy configuration %s: %s", path, err);
	} else {
		selfcheck_hap_spop(sc, path, text, len, spoe, n);
		selfcheck_hap_records(sc, path, text, len);
	}
	free(text);
}

int selfcheck_agent(FILE *out, const struct agent_config *cfg, const char *config_error)
{
	struct selfcheck sc = { .cfg = cfg };

	preflight_init(&sc.p, out);
	if (config_error) {
		preflight_report(&sc.p, 0, "configuration: %s", config_error);
		return preflight_finish(&sc.p, "tally-agent");
	}
	if (cfg->config_file[0])
		preflight_report(&sc.p, 1, "configuration: %s and the command line", cfg->config_file);
	else
		preflight_report(&sc.p, 1, "configuration: the command line (no --config)");
	preflight_db(&sc.p, cfg->db_path);
	selfcheck_secrets(&sc);
	selfcheck_journal(&sc);
	selfcheck_listeners(&sc);
	selfcheck_haproxy(&sc);
	return preflight_finish(&sc.p, "tally-agent");
}
