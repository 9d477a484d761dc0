/* thread: starting threads with signals blocked and a name (see thread.h). */
#include "thread.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

int thread_start(pthread_t *t, const char *name, void *(*fn)(void *), void *arg, char *err,
                 size_t errlen)
{
	sigset_t all, old;
	char shortname[16];
	int rc;

	/* The new thread inherits the mask: block everything around the creation. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(t, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		snprintf(err, errlen, "%s: pthread_create: %s", name, strerror(rc));
		return -1;
	}
	snprintf(shortname, sizeof(shortname), "%s", name);
	pthread_setname_np(*t, shortname);
	return 0;
}
