/* hash: FNV-1a (see hash.h). */
#include "hash.h"

#include <string.h>

#define HASH_FNV64_PRIME 1099511628211ull
#define HASH_FNV32_PRIME 16777619u

uint64_t hash_fnv1a64(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	while (n--)
		h = (h ^ *b++) * HASH_FNV64_PRIME;
	return h;
}

uint32_t hash_fnv1a32(uint32_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	while (n--)
		h = (h ^ *b++) * HASH_FNV32_PRIME;
	return h;
}

uint64_t hash_str64(const char *s)
{
	return hash_fnv1a64(HASH_FNV64_BASIS, s, strlen(s));
}
