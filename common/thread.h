/* thread: the one way the agent starts a thread. Every signal is blocked in the new
 * thread, so that SIGINT, SIGTERM and SIGPIPE reach only the main thread's loop (libev's
 * ev_signal watches them there), and the thread gets a name for ps, top and gdb. */
#ifndef TALLY_THREAD_H
#define TALLY_THREAD_H

#include <pthread.h>
#include <stddef.h>

/* Starts fn(arg) in *t, named name (15 characters at most are kept). 0, or -1 with a
 * message in err. */
int thread_start(pthread_t *t, const char *name, void *(*fn)(void *), void *arg, char *err,
                 size_t errlen);

#endif
