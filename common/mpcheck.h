/* mpcheck: makes msgpack-c safe on peer input. msgpack-c allocates room for all the
 * elements a container declares before reading any: five bytes can ask for gigabytes.
 * Used by the agent's control socket (requests) and queryd's control client (replies).
 * Pure; any thread. */
#ifndef TALLY_MPCHECK_H
#define TALLY_MPCHECK_H

/* Walks the headers of the first msgpack object in [p, end) and checks that it is
 * whole and that the elements still expected never outnumber the bytes left (each
 * takes one at least), which bounds what msgpack-c allocates by the input's size.
 * Bytes after the object are not looked at. 0, or -1 if not so. */
int mpcheck_bounded(const unsigned char *p, const unsigned char *end);

#endif
