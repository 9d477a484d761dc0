/* Unit tests of gwsecret: what a gateway secret may be, its derivation, and the two
 * comparisons the agent makes (the secret of a decision request, the MAC of a record). */
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <string.h>

#include "gwsecret.h"
#include "unit.h"

static void test_set(void)
{
	struct gwsecret s;
	char err[256];

	CHECK_EQ_INT(gwsecret_set(&s, "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0MTI=", 44, err,
	                          sizeof(err)), 0);
	CHECK_EQ_INT(s.len, 44);
	CHECK_EQ_INT(s.key_len, 32);
	CHECK(memcmp(s.key, "secretsecretsecretsecretsecret12", 32) == 0);
	/* openssl rand -hex 32 is base64 too: 64 characters, 48 bytes */
	CHECK_EQ_INT(gwsecret_set(&s, "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
	                          64, err, sizeof(err)), 0);
	CHECK_EQ_INT(s.key_len, 48);
	/* too short, not base64, padding inside, too few bytes */
	CHECK_EQ_INT(gwsecret_set(&s, "c2VjcmV0", 8, err, sizeof(err)), -1);
	CHECK(strstr(err, "openssl rand -base64 32") != NULL);
	CHECK_EQ_INT(gwsecret_set(&s, "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0M%I=", 44, err,
	                          sizeof(err)), -1);
	CHECK_EQ_INT(gwsecret_set(&s, "c2VjcmV0c2VjcmV0c2VjcmV0c2Vj=mV0c2VjcmV0MTI=", 44, err,
	                          sizeof(err)), -1);
	CHECK_EQ_INT(gwsecret_set(&s, "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0MTI", 43, err,
	                          sizeof(err)), -1);
	CHECK_EQ_INT(gwsecret_set(&s, "\"2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0MTI=", 44, err,
	                          sizeof(err)), -1);
}

static void test_derive_and_equal(void)
{
	unsigned char key[KEYHASH_SECRET_LEN] = { 1 };
	struct gwsecret a, b, c;

	gwsecret_derive(key, &a);
	gwsecret_derive(key, &b);
	key[31] = 1;
	gwsecret_derive(key, &c);
	CHECK_EQ_INT(a.len, 44);
	CHECK_EQ_STR(a.text, b.text);
	CHECK(strcmp(a.text, c.text) != 0);
	/* the key-hashing secret is not in it */
	CHECK(memmem(a.key, a.key_len, key, 8) == NULL);
	CHECK(gwsecret_equal(&a, b.text, b.len));
	CHECK(!gwsecret_equal(&a, c.text, c.len));
	CHECK(!gwsecret_equal(&a, a.text, a.len - 1));
	CHECK(!gwsecret_equal(&a, "", 0));
	{
		char longer[GWSECRET_MAX + 8];

		memset(longer, 'A', sizeof(longer));
		memcpy(longer, a.text, a.len);
		CHECK(!gwsecret_equal(&a, longer, sizeof(longer)));
	}
}

static void test_mac(void)
{
	unsigned char key[KEYHASH_SECRET_LEN] = { 3 }, digest[32], b64[45];
	unsigned int dlen = sizeof(digest);
	struct gwsecret s;
	struct gwsecret_mac *m;
	const char *msg = "1796278643040-1A2B-0001-00000000CAFE0001";

	gwsecret_derive(key, &s);
	m = gwsecret_mac_new(&s);
	CHECK(m != NULL);
	if (!m)
		return;
	HMAC(EVP_sha256(), s.key, (int)s.key_len, (const unsigned char *)msg, strlen(msg), digest,
	     &dlen);
	EVP_EncodeBlock(b64, digest, (int)sizeof(digest));
	CHECK(gwsecret_mac_ok(m, msg, strlen(msg), (const char *)b64, 44));
	CHECK(!gwsecret_mac_ok(m, msg, strlen(msg) - 1, (const char *)b64, 44));
	CHECK(!gwsecret_mac_ok(m, msg, strlen(msg), (const char *)b64, 43));
	b64[3] ^= 1;
	CHECK(!gwsecret_mac_ok(m, msg, strlen(msg), (const char *)b64, 44));
	CHECK(!gwsecret_mac_ok(m, msg, strlen(msg), "", 0));
	/* the key stays set from one check to the next */
	b64[3] ^= 1;
	CHECK(gwsecret_mac_ok(m, msg, strlen(msg), (const char *)b64, 44));
	gwsecret_mac_free(m);
}

int main(void)
{
	RUN(test_set);
	RUN(test_derive_and_equal);
	RUN(test_mac);
	return UNIT_DONE();
}
