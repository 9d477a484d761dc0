/* hash: FNV-1a, the one non-cryptographic hash of the tree, for hash tables keyed by
 * request ids or names (pending, dedupe, queryd's groups), the journal's entry
 * checksums and the mock upstream's response ids. Not for input a peer chooses: the
 * ids hashed are HAProxy's own uuids, and dedupe keeps only the hash. Pure, any
 * thread. */
#ifndef TALLY_HASH_H
#define TALLY_HASH_H

#include <stddef.h>
#include <stdint.h>

#define HASH_FNV64_BASIS 14695981039346656037ull
#define HASH_FNV32_BASIS 2166136261u

/* FNV-1a of p[0..n) continued from h (a basis, or an earlier result). */
uint64_t hash_fnv1a64(uint64_t h, const void *p, size_t n);
uint32_t hash_fnv1a32(uint32_t h, const void *p, size_t n);

/* FNV-1a 64 of a NUL-terminated string, from the basis. */
uint64_t hash_str64(const char *s);

#endif
