/* tally-agent main thread: configuration, database, listeners, accepting connections
 * and handing them to the I/O threads, noticing key and model changes, signals.
 * See worker.c for the threading design. */
#include <errno.h>
#include <ev.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config.h"
#include "db.h"
#include "keyhash.h"
#include "keytable.h"
#include "log.h"
#include "net.h"
#include "worker.h"

struct agent {
	struct agent_config cfg;
	sqlite3 *db;
	unsigned char secret[KEYHASH_SECRET_LEN];
	int64_t generation;
	struct worker *workers[CONFIG_MAX_THREADS];
	int nworkers;
	int next_worker;
	ev_io listeners[CONFIG_MAX_LISTEN];
	int nlisteners;
	ev_timer reload;
	ev_timer accept_pause;       /* out of file descriptors: listeners rest a moment */
	ev_signal sigint, sigterm;
};

static void agent_listeners_set(struct agent *a, struct ev_loop *loop, int on)
{
	int i;

	for (i = 0; i < a->nlisteners; i++) {
		if (on)
			ev_io_start(loop, &a->listeners[i]);
		else
			ev_io_stop(loop, &a->listeners[i]);
	}
}

static void agent_on_accept_resume(struct ev_loop *loop, ev_timer *t, int revents)
{
	(void)revents;
	agent_listeners_set(t->data, loop, 1);
}

static void agent_on_accept(struct ev_loop *loop, ev_io *io, int revents)
{
	struct agent *a = io->data;
	int fd;

	(void)revents;
	while ((fd = accept4(io->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
		struct worker *w = a->workers[a->next_worker];

		a->next_worker = (a->next_worker + 1) % a->nworkers;
		if (worker_post_conn(w, fd) < 0)
			close(fd);
	}
	if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
		/* The pending connection stays queued and would wake us again at once:
		 * stop listening for a moment instead of spinning. */
		log_warn("accept: %s; pausing new connections for 100 ms", strerror(errno));
		agent_listeners_set(a, loop, 0);
		ev_timer_set(&a->accept_pause, 0.1, 0.);
		ev_timer_start(loop, &a->accept_pause);
	} else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
		log_warn("accept: %s", strerror(errno));
	}
}

/* Publishes a new snapshot to every worker when the configuration generation moved. */
static void agent_on_reload(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct agent *a = t->data;
	struct keytable *kt;
	char err[256];
	int64_t gen = db_config_generation(a->db);
	int i;

	(void)loop;
	(void)revents;
	if (gen < 0 || gen == a->generation)
		return;
	if (keytable_load(a->db, a->secret, &kt, err, sizeof(err)) < 0) {
		log_error("%s (keeping the previous keys and models)", err);
		return;
	}
	log_info("configuration generation %lld: %zu keys, %zu models, %zu providers",
	         (long long)kt->generation, kt->nkeys, kt->nmodels, kt->nproviders);
	a->generation = kt->generation;
	keytable_ref(kt, a->nworkers - 1);
	for (i = 0; i < a->nworkers; i++)
		worker_post_keytable(a->workers[i], kt);
}

static void agent_on_signal(struct ev_loop *loop, ev_signal *s, int revents)
{
	(void)revents;
	log_info("signal %d: shutting down", s->signum);
	ev_break(loop, EVBREAK_ALL);
}

static int agent_open(struct agent *a, char *err, size_t errlen)
{
	char secret_path[CONFIG_PATH_MAX + 16];

	if (db_open(a->cfg.db_path, DB_CREATE, &a->db, err, errlen) < 0)
		return -1;
	if (a->cfg.secret_path[0])
		snprintf(secret_path, sizeof(secret_path), "%s", a->cfg.secret_path);
	else if (keyhash_secret_path_default(a->cfg.db_path, secret_path, sizeof(secret_path)) < 0) {
		snprintf(err, errlen, "database path too long");
		return -1;
	}
	return keyhash_secret_load(secret_path, 1, a->secret, err, errlen);
}

static int agent_start_workers(struct agent *a, char *err, size_t errlen)
{
	struct worker_limits limits = {
		.max_frame_size = a->cfg.max_frame_size,
		.max_connections = (a->cfg.max_connections + a->cfg.threads - 1) / a->cfg.threads,
		.hello_timeout = a->cfg.hello_timeout_ms / 1000.0,
		.idle_timeout = a->cfg.idle_timeout_ms / 1000.0,
	};
	struct keytable *kt;
	int i;

	if (keytable_load(a->db, a->secret, &kt, err, errlen) < 0)
		return -1;
	a->generation = kt->generation;
	log_info("loaded %zu keys, %zu models, %zu providers", kt->nkeys, kt->nmodels, kt->nproviders);
	keytable_ref(kt, a->cfg.threads - 1);
	for (i = 0; i < a->cfg.threads; i++) {
		a->workers[i] = worker_start(i, &limits, kt, err, errlen);
		if (!a->workers[i]) {
			for (; i < a->cfg.threads; i++)
				keytable_unref(kt);
			return -1;
		}
		a->nworkers++;
	}
	return 0;
}

static int agent_listen(struct agent *a, struct ev_loop *loop, char *err, size_t errlen)
{
	int i;

	for (i = 0; i < a->cfg.nlisten; i++) {
		int fd = net_listen(a->cfg.listen[i], err, errlen);

		if (fd < 0)
			return -1;
		ev_io_init(&a->listeners[i], agent_on_accept, fd, EV_READ);
		a->listeners[i].data = a;
		ev_io_start(loop, &a->listeners[i]);
		a->nlisteners++;
		log_info("listening on %s", a->cfg.listen[i]);
	}
	return 0;
}

static void agent_shutdown(struct agent *a, struct ev_loop *loop)
{
	struct worker_totals t;
	int i;

	for (i = 0; i < a->nlisteners; i++) {
		ev_io_stop(loop, &a->listeners[i]);
		close(a->listeners[i].fd);
		net_unlisten(a->cfg.listen[i]);
	}
	for (i = 0; i < a->nworkers; i++) {
		worker_stop(a->workers[i], &t);
		log_info("worker %d: %llu connections (%llu refused, %llu timed out), %llu notifies,"
		         " %llu allowed, %llu unreadable, %llu unknown frames", i,
		         (unsigned long long)t.connections, (unsigned long long)t.refused,
		         (unsigned long long)t.timeouts, (unsigned long long)t.notifies,
		         (unsigned long long)t.verdicts[DECISION_ALLOW],
		         (unsigned long long)t.bad_messages, (unsigned long long)t.skipped_frames);
	}
	if (a->db)
		sqlite3_close(a->db);
}

int main(int argc, char **argv)
{
	static struct agent a;
	struct ev_loop *loop = ev_default_loop(EVFLAG_AUTO);
	char err[512];
	int ret = 1;

	switch (config_parse(&a.cfg, argc, argv)) {
	case CONFIG_EXIT_OK:
		return 0;
	case CONFIG_ERROR:
		return 2;
	case CONFIG_OK:
		break;
	}
	log_set_level(a.cfg.log_level);
	signal(SIGPIPE, SIG_IGN);
	if (agent_open(&a, err, sizeof(err)) < 0 || agent_start_workers(&a, err, sizeof(err)) < 0 ||
	    agent_listen(&a, loop, err, sizeof(err)) < 0) {
		log_error("%s", err);
		goto out;
	}
	ev_init(&a.accept_pause, agent_on_accept_resume);
	a.accept_pause.data = &a;
	ev_timer_init(&a.reload, agent_on_reload, a.cfg.reload_interval_ms / 1000.0,
	              a.cfg.reload_interval_ms / 1000.0);
	a.reload.data = &a;
	ev_timer_start(loop, &a.reload);
	ev_signal_init(&a.sigint, agent_on_signal, SIGINT);
	ev_signal_init(&a.sigterm, agent_on_signal, SIGTERM);
	ev_signal_start(loop, &a.sigint);
	ev_signal_start(loop, &a.sigterm);
	log_info("tally-agent ready: %d I/O threads, database %s", a.nworkers, a.cfg.db_path);
	ev_run(loop, 0);
	ret = 0;
out:
	agent_shutdown(&a, loop);
	return ret;
}
