/* gwsecret: the gateway secret, shared by HAProxy (TALLY_GATEWAY_SECRET in its
 * environment, see haproxy/tally.cfg) and the agent, by which the agent tells what
 * the gateway's HAProxy sends from what any other process that reaches its ports sends:
 * only HAProxy writes accounting records.
 * - Every decision request (SPOE) carries the secret itself: SPOE messages are never
 *   logged anywhere.
 * - Every end-of-transaction record carries an HMAC-SHA256 under the secret (HAProxy's
 *   hmac converter) of every field of it the agent uses (record.h), never the secret:
 *   the same log line may also go to an operator's own log targets. A record HAProxy
 *   writes before any request had an id (a malformed request, a timeout) is named by its
 *   connection's nonce, which the MAC covers too.
 *
 * The secret is base64 (what HAProxy's hmac converter takes as its key: the key is the
 * decoded bytes), 32 to 128 characters decoding to 24 bytes or more. Unless the operator
 * sets one, it is derived from the key-hashing secret (an HMAC of a fixed label under
 * it, which reveals nothing of that secret), so that one secret file serves both;
 * `tallyctl gateway-secret` prints it. Pure functions, any thread. */
#ifndef TALLY_GWSECRET_H
#define TALLY_GWSECRET_H

#include <stddef.h>

#include "keyhash.h"

#define GWSECRET_MIN 32
#define GWSECRET_MAX 128
#define GWSECRET_KEY_MIN 24
#define GWSECRET_ENV "TALLY_GATEWAY_SECRET"
#define GWSECRET_MAC_LEN 44          /* base64 of an HMAC-SHA256 */

struct gwsecret {
	size_t len;
	char text[GWSECRET_MAX + 1];    /* as HAProxy has it; zero-padded to the end */
	size_t key_len;
	unsigned char key[GWSECRET_MAX];   /* the decoded bytes: the HMAC key */
};

/* The secret derived from the key-hashing secret (base64 of 32 bytes). */
void gwsecret_derive(const unsigned char key_secret[KEYHASH_SECRET_LEN], struct gwsecret *out);

/* Sets out to text[0..len). 0, or -1 with a message if it is not a valid secret. */
int gwsecret_set(struct gwsecret *out, const char *text, size_t len, char *err, size_t errlen);

/* The operator's secret, from GWSECRET_ENV: 1 when set there (out filled), 0 when the
 * variable is unset or empty (the secret is then the derived one), -1 with a message
 * when it is set but not a valid secret. */
int gwsecret_from_env(struct gwsecret *out, char *err, size_t errlen);

/* 1 if p[0..len) is the secret, else 0. Constant time: every byte of the largest secret
 * is compared whatever len is, so that neither the secret nor its length shows. */
int gwsecret_equal(const struct gwsecret *s, const char *p, size_t len);

/* A checker of records' MACs, its HMAC key set up once (a one-shot HMAC costs 5 times
 * more). Not thread-safe: one per thread that checks (the intake's). NULL: out of
 * memory. */
struct gwsecret_mac;
struct gwsecret_mac *gwsecret_mac_new(const struct gwsecret *s);
void gwsecret_mac_free(struct gwsecret_mac *m);

/* 1 if mac[0..maclen) is the base64 HMAC-SHA256 of msg[0..len) under the secret, as
 * HAProxy's hmac(sha256,...),base64 writes it; compared in constant time. */
int gwsecret_mac_ok(struct gwsecret_mac *m, const char *msg, size_t len, const char *mac,
                    size_t maclen);

/* The same over a message given in pieces: begin (0, or -1 on an OpenSSL failure), add
 * each piece (0 or -1), then end, 1 if mac[0..maclen) is its MAC. */
int gwsecret_mac_begin(struct gwsecret_mac *m);
int gwsecret_mac_add(struct gwsecret_mac *m, const void *p, size_t len);
int gwsecret_mac_end(struct gwsecret_mac *m, const char *mac, size_t maclen);

#endif
