/* net: creates the agent's listening sockets (main thread, at start). */
#include "net.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* Mode of the unix sockets the agent makes (net_set_unix_mode). */
static unsigned net_unix_mode = 0660;

void net_set_unix_mode(unsigned mode)
{
	net_unix_mode = mode;
}

/* Unlinks path only when it is a socket: a mistyped address must not delete a file. */
static int net_unlink_socket(const char *path)
{
	struct stat st;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -1;
	if (!S_ISSOCK(st.st_mode)) {
		errno = EEXIST;
		return -1;
	}
	return unlink(path);
}

void net_unlisten(const char *addr)
{
	char dgram[sizeof(((struct sockaddr_un *)0)->sun_path) + 8];

	if (strncmp(addr, "unix:", 5) != 0)
		return;
	net_unlink_socket(addr + 5);
	snprintf(dgram, sizeof(dgram), "%s" NET_DGRAM_SUFFIX, addr + 5);
	net_unlink_socket(dgram);
}

/* The datagram socket of a records address unix:/path, at path NET_DGRAM_SUFFIX, bound
 * under a temporary name that gets the mode before the final name is reachable. */
static int net_bind_unix_dgram(const char *path, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char final[sizeof(sa.sun_path)];
	int fd = -1;

	if ((size_t)snprintf(final, sizeof(final), "%s" NET_DGRAM_SUFFIX, path) >= sizeof(final) ||
	    (size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s.tmp", final) >=
	    sizeof(sa.sun_path)) {
		snprintf(err, errlen, "unix socket path too long: %s", path);
		return -1;
	}
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || net_unlink_socket(sa.sun_path) < 0 || net_unlink_socket(final) < 0 ||
	    bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(sa.sun_path, net_unix_mode) < 0 ||
	    rename(sa.sun_path, final) < 0)
		goto fail;
	return fd;
fail:
	snprintf(err, errlen, "bind unix:%s: %s", final, strerror(errno));
	if (fd >= 0)
		close(fd);
	return -1;
}

/* 0 if nothing receives datagrams at the records address unix:/path's socket, else -1
 * with err set (--self-check: a running agent's). */
static int net_probe_unix_dgram(const char *path, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, rc;

	if ((size_t)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s" NET_DGRAM_SUFFIX, path) >=
	    sizeof(sa.sun_path)) {
		snprintf(err, errlen, "unix socket path too long: %s", path);
		return -1;
	}
	if ((fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0) {
		snprintf(err, errlen, "socket: %s", strerror(errno));
		return -1;
	}
	rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	if (rc == 0) {
		snprintf(err, errlen, "bind unix:%s: another process receives there", sa.sun_path);
		return -1;
	}
	return 0;
}

int net_listen_unix(const char *path, unsigned mode, char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "unix socket path too long: %s", path);
		return -1;
	}
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || net_unlink_socket(path) < 0)
		goto fail;
	/* Nobody can connect before listen(), so the file is never reachable with the
	 * umask's looser mode. */
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || (mode && chmod(path, mode) < 0) ||
	    listen(fd, 1024) < 0)
		goto fail;
	return fd;
fail:
	snprintf(err, errlen, "listen on unix:%s: %s", path, strerror(errno));
	if (fd >= 0)
		close(fd);
	return -1;
}

/* A bound TCP listener (type SOCK_STREAM) or UDP socket (SOCK_DGRAM) on host:port, with
 * SO_REUSEADDR when reuse is set. */
static int net_bind_inet(const char *addr, int type, int reuse, char *err, size_t errlen)
{
	char host[256];
	const char *colon = strrchr(addr, ':');
	struct addrinfo hints = { .ai_socktype = type, .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *res = NULL;
	size_t hlen;
	int fd = -1, one = 1, rc;

	if (!colon || colon == addr || !colon[1]) {
		snprintf(err, errlen, "bad listen address '%s' (want host:port or unix:/path)", addr);
		return -1;
	}
	hlen = (size_t)(colon - addr);
	if (addr[0] == '[' && colon[-1] == ']') {
		addr++;
		hlen -= 2;
	}
	if (hlen >= sizeof(host)) {
		snprintf(err, errlen, "host name too long in '%s'", addr);
		return -1;
	}
	memcpy(host, addr, hlen);
	host[hlen] = '\0';
	if ((rc = getaddrinfo(host, colon + 1, &hints, &res)) != 0) {
		snprintf(err, errlen, "resolve %s: %s", addr, gai_strerror(rc));
		return -1;
	}
	fd = socket(res->ai_family, res->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || (reuse && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0) ||
	    bind(fd, res->ai_addr, res->ai_addrlen) < 0 ||
	    (type == SOCK_STREAM && listen(fd, 1024) < 0))
		goto fail;
	freeaddrinfo(res);
	return fd;
fail:
	snprintf(err, errlen, "%s on %s: %s", type == SOCK_STREAM ? "listen" : "bind", addr,
	         strerror(errno));
	if (fd >= 0)
		close(fd);
	freeaddrinfo(res);
	return -1;
}

int net_listen(const char *addr, char *err, size_t errlen)
{
	if (strncmp(addr, "unix:", 5) == 0)
		return net_listen_unix(addr + 5, net_unix_mode, err, errlen);
	return net_bind_inet(addr, SOCK_STREAM, 1, err, errlen);
}

void net_tune(int fd)
{
	int one = 1;

	/* Fails harmlessly (ENOTSUP) on unix sockets. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int net_bind_udp(const char *addr, char *err, size_t errlen)
{
	if (strncmp(addr, "unix:", 5) == 0)
		return net_bind_unix_dgram(addr + 5, err, errlen);
	return net_bind_inet(addr, SOCK_DGRAM, 1, err, errlen);
}

int net_probe_udp(const char *addr, char *err, size_t errlen)
{
	if (strncmp(addr, "unix:", 5) == 0)
		return net_probe_unix_dgram(addr + 5, err, errlen);
	return net_bind_inet(addr, SOCK_DGRAM, 0, err, errlen);
}
