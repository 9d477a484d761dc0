/* reload: the configuration watcher (see reload.h). Its own thread; the main thread
 * only starts and stops it. */
#include "reload.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "acct.h"
#include "db.h"
#include "intake.h"
#include "keytable.h"
#include "log.h"
#include "spend.h"
#include "teamspend.h"
#include "thread.h"
#include "worker.h"

struct reload {
	struct reload_target t;
	pthread_t thread;
	pthread_mutex_t lock;            /* guards stop */
	pthread_cond_t wake;
	int stop;
	int failing;                     /* the last poll or load failed (logged) */
	struct keytable *kt;             /* the newest snapshot, our reference (the teams'
	                                  * spend is read for its teams) */
	int64_t teams_at_ms;             /* the teams' spend was read then */
	int teams_failing;               /* the last read of it failed (logged) */
};

/* Logs a failure once, until a poll succeeds again. */
static void reload_failed(struct reload *r, const char *what)
{
	if (r->failing)
		return;
	r->failing = 1;
	log_error("%s (keeping the keys and models of configuration generation %lld, and "
	          "deciding with them)", what, (long long)r->t.generation);
}

static void reload_publish(struct reload *r, struct keytable *kt)
{
	int i;

	keytable_ref(kt, r->t.nworkers);
	for (i = 0; i < r->t.nworkers; i++)
		worker_post_keytable(r->t.workers[i], kt);
	intake_post_keytable(r->t.intake, kt);
}

/* Reads the teams' spend again when kt is new or the last read is older than the
 * interval. */
static void reload_teams(struct reload *r, int changed)
{
	int64_t now = acct_now_ms();
	char err[512];

	if (!r->t.teams || !r->kt || (!changed && now - r->teams_at_ms < TEAMSPEND_INTERVAL_MS))
		return;
	r->teams_at_ms = now;
	if (teamspend_refresh(r->t.teams, r->t.db, r->kt, now, err, sizeof(err)) < 0) {
		if (!r->teams_failing)
			log_error("%s (the team gauges keep their last figures)", err);
		r->teams_failing = 1;
		return;
	}
	r->teams_failing = 0;
}

/* Keeps kt (one reference, ours) as the newest snapshot. */
static void reload_keep(struct reload *r, struct keytable *kt)
{
	keytable_unref(r->kt);
	r->kt = kt;
}

static void reload_poll(struct reload *r)
{
	struct keytable *kt = NULL;
	char err[512];
	int64_t gen = db_config_generation(r->t.db);

	if (gen < 0) {
		snprintf(err, sizeof(err), "cannot read the configuration generation: %s",
		         db_errmsg(r->t.db));
		reload_failed(r, err);
		return;
	}
	if (gen != r->t.generation && keytable_load(r->t.db, r->t.secret, &kt, err, sizeof(err)) < 0) {
		reload_failed(r, err);
		return;
	}
	if (r->failing)
		log_info("the store answers again: configuration generation %lld", (long long)gen);
	r->failing = 0;
	if (gen == r->t.generation) {
		reload_teams(r, 0);
		return;
	}
	log_info("configuration generation %lld: %zu keys, %zu models, %zu providers",
	         (long long)kt->generation, kt->nkeys, kt->nmodels, kt->nproviders);
	if (spend_seed(r->t.db, kt, r->t.quota, acct_now_ms(), err, sizeof(err)) < 0)
		log_error("%s (budgets count from what this run saw)", err);
	r->t.generation = kt->generation;
	keytable_ref(kt, 1);
	reload_keep(r, kt);
	reload_publish(r, kt);
	reload_teams(r, 1);
}

static void *reload_main(void *arg)
{
	struct reload *r = arg;
	struct timespec at;

	pthread_mutex_lock(&r->lock);
	while (!r->stop) {
		clock_gettime(CLOCK_MONOTONIC, &at);
		at.tv_sec += r->t.interval_ms / 1000;
		at.tv_nsec += (long)(r->t.interval_ms % 1000) * 1000000L;
		if (at.tv_nsec >= 1000000000L) {
			at.tv_sec++;
			at.tv_nsec -= 1000000000L;
		}
		while (!r->stop && pthread_cond_timedwait(&r->wake, &r->lock, &at) != ETIMEDOUT)
			;
		if (r->stop)
			break;
		pthread_mutex_unlock(&r->lock);
		reload_poll(r);
		pthread_mutex_lock(&r->lock);
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

struct reload *reload_start(const struct reload_target *t, char *err, size_t errlen)
{
	struct reload *r = calloc(1, sizeof(*r));
	pthread_condattr_t ca;

	if (!r) {
		snprintf(err, errlen, "reload: out of memory");
		keytable_unref(t->kt);
		return NULL;
	}
	r->t = *t;
	r->kt = t->kt;
	pthread_mutex_init(&r->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&r->wake, &ca);
	pthread_condattr_destroy(&ca);
	if (thread_start(&r->thread, "tally-reload", reload_main, r, err, errlen) < 0) {
		keytable_unref(r->kt);
		pthread_cond_destroy(&r->wake);
		pthread_mutex_destroy(&r->lock);
		free(r);
		return NULL;
	}
	return r;
}

void reload_stop(struct reload *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	r->stop = 1;
	pthread_cond_signal(&r->wake);
	pthread_mutex_unlock(&r->lock);
	pthread_join(r->thread, NULL);
	keytable_unref(r->kt);
	pthread_cond_destroy(&r->wake);
	pthread_mutex_destroy(&r->lock);
	free(r);
}
