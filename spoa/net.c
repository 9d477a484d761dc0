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
	if (strncmp(addr, "unix:", 5) == 0)
		net_unlink_socket(addr + 5);
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
		return net_listen_unix(addr + 5, 0, err, errlen);
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
	return net_bind_inet(addr, SOCK_DGRAM, 1, err, errlen);
}

int net_probe_udp(const char *addr, char *err, size_t errlen)
{
	return net_bind_inet(addr, SOCK_DGRAM, 0, err, errlen);
}
