/* gwsecret: deriving, checking and comparing the gateway secret, and the records' MACs
 * (see gwsecret.h). */
#include "gwsecret.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the derived secret is the HMAC of: a fixed label, versioned so that a later
 * derivation can never collide with this one. */
#define GWSECRET_LABEL "tally gateway secret 1"

static int gwsecret_b64_char(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
	       c == '+' || c == '/';
}

void gwsecret_derive(const unsigned char key_secret[KEYHASH_SECRET_LEN], struct gwsecret *out)
{
	unsigned char mac[32], text[4 * ((sizeof(mac) + 2) / 3) + 1];
	unsigned int maclen = sizeof(mac);
	char err[128];

	HMAC(EVP_sha256(), key_secret, KEYHASH_SECRET_LEN, (const unsigned char *)GWSECRET_LABEL,
	     sizeof(GWSECRET_LABEL) - 1, mac, &maclen);
	EVP_EncodeBlock(text, mac, (int)sizeof(mac));
	/* 44 characters of base64: valid by construction. */
	gwsecret_set(out, (const char *)text, sizeof(text) - 1, err, sizeof(err));
	OPENSSL_cleanse(mac, sizeof(mac));
	OPENSSL_cleanse(text, sizeof(text));
}

int gwsecret_set(struct gwsecret *out, const char *text, size_t len, char *err, size_t errlen)
{
	char copy[GWSECRET_MAX + 1];
	unsigned char key[GWSECRET_MAX];
	size_t i, pad = 0;
	int n;

	if (len < GWSECRET_MIN || len > GWSECRET_MAX || len % 4) {
		snprintf(err, errlen, "the gateway secret must be base64 of 32 to 128 characters"
		         " (e.g. openssl rand -base64 32), not %zu characters", len);
		return -1;
	}
	for (i = 0; i < len; i++) {
		if (text[i] == '=' && i >= len - 2) {
			pad++;
		} else if (pad || !gwsecret_b64_char(text[i])) {
			snprintf(err, errlen, "the gateway secret is not base64"
			         " (e.g. openssl rand -base64 32)");
			return -1;
		}
	}
	memcpy(copy, text, len);
	copy[len] = '\0';
	n = EVP_DecodeBlock(key, (const unsigned char *)copy, (int)len);
	if (n < 0 || (size_t)n - pad < GWSECRET_KEY_MIN) {
		snprintf(err, errlen, "the gateway secret must decode to %d bytes or more",
		         GWSECRET_KEY_MIN);
		return -1;
	}
	memset(out, 0, sizeof(*out));
	memcpy(out->text, text, len);
	out->len = len;
	memcpy(out->key, key, (size_t)n - pad);
	out->key_len = (size_t)n - pad;
	OPENSSL_cleanse(key, sizeof(key));
	return 0;
}

int gwsecret_from_env(struct gwsecret *out, char *err, size_t errlen)
{
	const char *env = getenv(GWSECRET_ENV);

	if (!env || !*env)
		return 0;
	return gwsecret_set(out, env, strlen(env), err, errlen) < 0 ? -1 : 1;
}

int gwsecret_equal(const struct gwsecret *s, const char *p, size_t len)
{
	unsigned diff = len != s->len;
	size_t i;

	for (i = 0; i < GWSECRET_MAX; i++)
		diff |= (unsigned char)(i < len ? p[i] : 0) ^ (unsigned char)s->text[i];
	return diff == 0;
}

struct gwsecret_mac {
	EVP_MAC *mac;
	EVP_MAC_CTX *ctx;
};

void gwsecret_mac_free(struct gwsecret_mac *m)
{
	if (!m)
		return;
	EVP_MAC_CTX_free(m->ctx);
	EVP_MAC_free(m->mac);
	free(m);
}

struct gwsecret_mac *gwsecret_mac_new(const struct gwsecret *s)
{
	struct gwsecret_mac *m = calloc(1, sizeof(*m));
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
		OSSL_PARAM_construct_end(),
	};

	if (!m || !(m->mac = EVP_MAC_fetch(NULL, "HMAC", NULL)) ||
	    !(m->ctx = EVP_MAC_CTX_new(m->mac)) ||
	    !EVP_MAC_init(m->ctx, s->key, s->key_len, params)) {
		gwsecret_mac_free(m);
		return NULL;
	}
	return m;
}

int gwsecret_mac_begin(struct gwsecret_mac *m)
{
	/* Init without a key keeps the one set: only the message's work is done here. */
	return EVP_MAC_init(m->ctx, NULL, 0, NULL) ? 0 : -1;
}

int gwsecret_mac_add(struct gwsecret_mac *m, const void *p, size_t len)
{
	return EVP_MAC_update(m->ctx, p, len) ? 0 : -1;
}

int gwsecret_mac_end(struct gwsecret_mac *m, const char *mac, size_t maclen)
{
	unsigned char digest[32], want[GWSECRET_MAC_LEN + 1];
	size_t dlen;

	if (!EVP_MAC_final(m->ctx, digest, &dlen, sizeof(digest)) || dlen != sizeof(digest) ||
	    maclen != GWSECRET_MAC_LEN)
		return 0;
	EVP_EncodeBlock(want, digest, (int)sizeof(digest));
	return CRYPTO_memcmp(want, mac, GWSECRET_MAC_LEN) == 0;
}

int gwsecret_mac_ok(struct gwsecret_mac *m, const char *msg, size_t len, const char *mac,
                    size_t maclen)
{
	return gwsecret_mac_begin(m) == 0 && gwsecret_mac_add(m, msg, len) == 0 &&
	       gwsecret_mac_end(m, mac, maclen);
}
