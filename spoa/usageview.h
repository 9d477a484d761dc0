/* usageview: what a key or a team spent in its budget's current period, as the store's
 * rollups hold it (key_hourly, team_hourly: every node's rows), for the usage a key
 * reads on the gateway (GET /tally/v1/usage, decision.h's DECISION_USAGE_REPORTED).
 *
 * Read by the asking I/O thread on a read-only connection of its own, within the
 * thread's probe time (probe.h), and kept USAGEVIEW_FRESH_MS: a key that asks in a loop
 * reads the store once a second, and keys that ask together cannot hold a thread for
 * more than its probe time. Why the store and not the limits' counts (quota.c): on
 * several nodes each agent counts only its own grants, and a key without a budget is
 * counted nowhere else; the rollups lag the rows still queued by the writers (well
 * under a second). Thread-safe. */
#ifndef TALLY_USAGEVIEW_H
#define TALLY_USAGEVIEW_H

#include <stdint.h>

#include "acct-t.h"

#define USAGEVIEW_FRESH_MS 1000
#define USAGEVIEW_SLOTS 4096        /* figures kept, by subject's hash: one replaces another */
#define USAGEVIEW_PAGE_SCAN 256     /* end users a page examines at most */

struct usageview;

/* store: a SQLite path or a PostgreSQL URL (copied). NULL on ENOMEM or a path too long. */
struct usageview *usageview_new(const char *store);
void usageview_free(struct usageview *u);     /* after every other thread stopped */

/* What subject (a key's id, quota_team_subject's, or a model budget's, whose model is
 * model; else model is NULL) was charged (reported plus estimated cost, micro-dollars)
 * since since_ms (unix ms, on the hour: budget periods are; a model budget's on the
 * day), as read at *as_of_ms (unix ms). 0; or -1 when no figure can be read now (the
 * store fails, or the thread's probe time is spent): the caller answers "try again". */
int usageview_spent(struct usageview *u, int64_t subject, const char *model, int64_t since_ms,
                    int64_t now_ms, int64_t *spent, int64_t *as_of_ms);

/* One end user of a key's page (usageview_end_users). */
struct usageview_end_user {
	char id[ACCT_END_USER_MAX];
	int64_t requests;
	int64_t spent;                 /* reported plus estimated cost, micro-dollars */
};

/* A page of key_id's end users with rows since since_ms (unix ms, on the day: budget
 * periods are), from end_user_daily: the first n after `after` ("" from the first) in
 * the store's order of ids, each with its requests and spend. Read every time (pages
 * are not kept), within the thread's probe time, and at most USAGEVIEW_PAGE_SCAN of the
 * key's end users examined (with every day each has): when that many were examined
 * before n were found, stopped_at (ACCT_END_USER_MAX bytes, not after's) holds the last
 * one, where the next page begins; else "". How many (0 to n), or -1 when the store cannot be
 * read now. */
int usageview_end_users(struct usageview *u, int64_t key_id, int64_t since_ms,
                        const char *after, int64_t now_ms, struct usageview_end_user *out,
                        int n, char *stopped_at);

/* Store reads so far (fresh figures answer without one). */
uint64_t usageview_reads(struct usageview *u);

#endif
