/* longbody: long request bodies assembled from their pieces (see longbody.h). Any I/O
 * thread; one mutex, held for a walk of the few bodies in assembly and one memcpy.
 *
 * A body's reservation is taken against max_bytes, and against key_max_bytes summed
 * over its key's bodies, when its first piece comes, so both bounds hold however its
 * pieces interleave with others'. Few bodies are in assembly at
 * once (max_bytes / HAProxy's large buffer), so a list serves; every call drops the
 * bodies past their time first. */
#include "longbody.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct longbody_entry {
	struct longbody_entry *next;
	char id[LONGBODY_ID_MAX];
	size_t idlen;
	int64_t key;
	int64_t started_ms;
	size_t total, len;
	size_t reserved;              /* max(total, hold) */
	char *buf;                    /* total bytes */
};

struct longbody {
	pthread_mutex_t lock;
	struct longbody_entry *head;
	size_t reserved;              /* sum of the entries' reservations */
	size_t max_bytes;
	size_t key_max_bytes;
};

struct longbody *longbody_new(size_t max_bytes, size_t key_max_bytes)
{
	struct longbody *lb = calloc(1, sizeof(*lb));

	if (!lb)
		return NULL;
	pthread_mutex_init(&lb->lock, NULL);
	lb->max_bytes = max_bytes;
	lb->key_max_bytes = key_max_bytes;
	return lb;
}

static void longbody_entry_free(struct longbody_entry *e)
{
	free(e->buf);
	free(e);
}

void longbody_free(struct longbody *lb)
{
	struct longbody_entry *e;

	if (!lb)
		return;
	while ((e = lb->head)) {
		lb->head = e->next;
		longbody_entry_free(e);
	}
	pthread_mutex_destroy(&lb->lock);
	free(lb);
}

/* Unlinks *slot and frees it. Lock held. */
static void longbody_drop(struct longbody *lb, struct longbody_entry **slot)
{
	struct longbody_entry *e = *slot;

	*slot = e->next;
	lb->reserved -= e->reserved;
	longbody_entry_free(e);
}

/* The slot of id's entry, or of the list's end. Lock held. */
static struct longbody_entry **longbody_find(struct longbody *lb, const char *id, size_t idlen)
{
	struct longbody_entry **slot = &lb->head;

	while (*slot && ((*slot)->idlen != idlen || memcmp((*slot)->id, id, idlen) != 0))
		slot = &(*slot)->next;
	return slot;
}

/* Drops the bodies whose decision did not come in time. Lock held. */
static void longbody_expire(struct longbody *lb, int64_t now_ms)
{
	struct longbody_entry **slot = &lb->head;

	while (*slot) {
		if (now_ms - (*slot)->started_ms > LONGBODY_TTL_MS)
			longbody_drop(lb, slot);
		else
			slot = &(*slot)->next;
	}
}

/* Bytes reserved by key's bodies. Lock held. */
static size_t longbody_key_reserved(const struct longbody *lb, int64_t key)
{
	const struct longbody_entry *e;
	size_t n = 0;

	for (e = lb->head; e; e = e->next)
		if (e->key == key)
			n += e->reserved;
	return n;
}

/* A new entry for id of key at off 0, max(total, hold) reserved; NULL if there is no
 * room, in all or in key's share. Lock held. */
static struct longbody_entry *longbody_start(struct longbody *lb, const char *id,
                                             size_t idlen, int64_t key, size_t total,
                                             size_t hold, int64_t now_ms)
{
	size_t want = total > hold ? total : hold;
	size_t key_used = longbody_key_reserved(lb, key);
	struct longbody_entry *e;

	if (want > lb->max_bytes - lb->reserved ||
	    key_used > lb->key_max_bytes || want > lb->key_max_bytes - key_used ||
	    !(e = calloc(1, sizeof(*e))))
		return NULL;
	if (!(e->buf = malloc(total))) {
		free(e);
		return NULL;
	}
	memcpy(e->id, id, idlen);
	e->idlen = idlen;
	e->key = key;
	e->started_ms = now_ms;
	e->total = total;
	e->reserved = want;
	e->next = lb->head;
	lb->head = e;
	lb->reserved += want;
	return e;
}

int64_t longbody_append(struct longbody *lb, const char *id, size_t idlen, int64_t key,
                        int64_t off, int64_t total, int64_t hold, const char *data, size_t len,
                        int64_t now_ms)
{
	struct longbody_entry **slot, *e = NULL;
	int64_t got = -1;

	if (idlen == 0 || idlen > LONGBODY_ID_MAX)
		return -1;
	pthread_mutex_lock(&lb->lock);
	longbody_expire(lb, now_ms);
	slot = longbody_find(lb, id, idlen);
	if (*slot && (off == 0 || (*slot)->total != (size_t)total || (*slot)->len != (size_t)off))
		longbody_drop(lb, slot);   /* a new start, or a piece that does not follow */
	else
		e = *slot;
	if (total <= 0 || total > LONGBODY_BODY_MAX || off < 0 || len == 0 ||
	    (uint64_t)off + len > (uint64_t)total)
		goto out;
	if (off == 0)
		e = longbody_start(lb, id, idlen, key, (size_t)total, hold > 0 ? (size_t)hold : 0, now_ms);
	if (!e)
		goto out;
	memcpy(e->buf + e->len, data, len);
	e->len += len;
	got = (int64_t)e->len;
out:
	/* A refused piece leaves nothing behind: its body could never be whole. */
	if (got < 0 && e)
		longbody_drop(lb, longbody_find(lb, id, idlen));
	pthread_mutex_unlock(&lb->lock);
	return got;
}

int longbody_take(struct longbody *lb, const char *id, size_t idlen, char **body, size_t *len,
                  int64_t now_ms)
{
	struct longbody_entry **slot, *e;
	int whole = 0;

	if (idlen == 0 || idlen > LONGBODY_ID_MAX)
		return 0;
	pthread_mutex_lock(&lb->lock);
	longbody_expire(lb, now_ms);
	slot = longbody_find(lb, id, idlen);
	if ((e = *slot)) {
		*slot = e->next;
		lb->reserved -= e->reserved;
		whole = e->len == e->total;
	}
	pthread_mutex_unlock(&lb->lock);
	if (!e)
		return 0;
	if (whole) {
		*body = e->buf;
		*len = e->len;
		e->buf = NULL;
	}
	longbody_entry_free(e);
	return whole;
}

size_t longbody_bytes(struct longbody *lb)
{
	size_t n;

	pthread_mutex_lock(&lb->lock);
	n = lb->reserved;
	pthread_mutex_unlock(&lb->lock);
	return n;
}
