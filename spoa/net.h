/* net: listening sockets for the agent (main thread). In the spirit of Redis' anet:
 * small wrappers that turn an address string into a ready, non-blocking socket. */
#ifndef TALLY_NET_H
#define TALLY_NET_H

#include <stddef.h>

/* addr is "host:port", "[v6]:port" or "unix:/path" (a stale socket file there is
 * replaced; any other kind of file is left alone and refused; the socket gets the mode
 * of net_set_unix_mode). Returns a non-blocking, close-on-exec listening fd, or -1 with
 * err set. */
int net_listen(const char *addr, char *err, size_t errlen);

/* The mode of every unix socket the agent makes (default 0660): main thread, before
 * any listener. */
void net_set_unix_mode(unsigned mode);

/* Where the records' datagrams go for a records address unix:/path: /path followed by
 * this (HAProxy's log target; the ring's stream connects to /path itself). */
#define NET_DGRAM_SUFFIX ".dgram"

/* net_listen for a unix socket at path whose file gets mode (e.g. 0600) before anyone
 * can connect; mode 0 keeps what the umask gives. */
int net_listen_unix(const char *path, unsigned mode, char *err, size_t errlen);

/* A non-blocking, close-on-exec UDP socket bound to "host:port", or for "unix:/path" a
 * unix datagram socket at /path NET_DGRAM_SUFFIX; or -1 with err set. */
int net_bind_udp(const char *addr, char *err, size_t errlen);

/* net_bind_udp without SO_REUSEADDR (--self-check): it fails while any other socket
 * holds the address, even one that set SO_REUSEADDR (a running agent's), with which
 * net_bind_udp would share it and the records. */
int net_probe_udp(const char *addr, char *err, size_t errlen);

/* Removes the socket files of a "unix:/path" address (its datagram one too), if they
 * are still sockets. */
void net_unlisten(const char *addr);

/* Makes an accepted socket ready for SPOP: TCP_NODELAY where it applies. */
void net_tune(int fd);

#endif
