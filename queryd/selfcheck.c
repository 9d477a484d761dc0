/* selfcheck: tally-queryd --self-check (see selfcheck.h). Main thread, run instead of a
 * start: MHD never starts, no connection is kept. */
#include "selfcheck.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "assets.h"
#include "preflight.h"
#include "server.h"
#include "token.h"

#define SELFCHECK_TOKEN_MAX (SERVER_TOKEN_MAX + 3)   /* a token, CRLF, NUL */

static void selfcheck_token(struct preflight *p, const struct selfcheck_queryd *c)
{
	static char token[SELFCHECK_TOKEN_MAX];
	char err[4200];

	if (c->token_file) {
		if (token_read_file(c->token_file, token, sizeof(token), err, sizeof(err)) < 0 ||
		    token_file_private(c->token_file, err, sizeof(err)) < 0 ||
		    server_token_check(token, err, sizeof(err)) < 0)
			preflight_report(p, 0, "operator token: %s", err);
		else
			preflight_report(p, 1, "operator token: from %s, private", c->token_file);
		explicit_bzero(token, sizeof(token));
	} else if (c->token_env && *c->token_env) {
		if (server_token_check(c->token_env, err, sizeof(err)) < 0)
			preflight_report(p, 0, "operator token (TALLY_OPERATOR_TOKEN): %s", err);
		else
			preflight_report(p, 1, "operator token: from TALLY_OPERATOR_TOKEN");
	} else {
		preflight_report(p, 1, "operator token: none (TALLY_OPERATOR_TOKEN unset, no "
		                 "--token-file): only /api/health and the dashboard's files are served");
	}
}

/* Binds the listen address as MHD would (SO_REUSEADDR, its default), then closes it. */
static void selfcheck_listen(struct preflight *p, const char *addr)
{
	struct sockaddr_storage sa;
	socklen_t len;
	char err[512];
	int fd, one = 1;

	if (server_address(addr, &sa, err, sizeof(err)) < 0) {
		preflight_report(p, 0, "listener: %s", err);
		return;
	}
	len = sa.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
	fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&sa, len) < 0 || listen(fd, 16) < 0)
		preflight_report(p, 0, "listener: listen on %s: %s", addr, strerror(errno));
	else
		preflight_report(p, 1, "listener %s: can listen", addr);
	if (fd >= 0)
		close(fd);
}

static void selfcheck_dashboard(struct preflight *p, const char *static_dir)
{
	char path[4200];
	size_t i;

	if (static_dir) {
		const char *why = NULL;
		struct stat st;

		snprintf(path, sizeof(path), "%s/index.html", static_dir);
		if (stat(path, &st) < 0)
			why = strerror(errno);
		else if (!S_ISREG(st.st_mode))
			why = "not a regular file";
		else if (access(path, R_OK) < 0)
			why = strerror(errno);
		if (why)
			preflight_report(p, 0, "dashboard: --static %s: index.html: %s", static_dir, why);
		else
			preflight_report(p, 1, "dashboard: files from %s", static_dir);
		return;
	}
	for (i = 0; i < assets_count; i++)
		if (strcmp(assets_files[i].path, "index.html") == 0 && assets_files[i].len > 0)
			break;
	if (i == assets_count)
		preflight_report(p, 0, "dashboard: no index.html among the %zu embedded files "
		                 "(rebuild: make build)", assets_count);
	else
		preflight_report(p, 1, "dashboard: %zu files embedded", assets_count);
}

int selfcheck_queryd(FILE *out, const struct selfcheck_queryd *c, const char *config_error)
{
	struct preflight p;

	preflight_init(&p, out);
	if (config_error) {
		preflight_report(&p, 0, "configuration: %s", config_error);
		return preflight_finish(&p, "tally-queryd");
	}
	preflight_report(&p, 1, "configuration: the command line");
	preflight_db(&p, c->db);
	selfcheck_token(&p, c);
	selfcheck_listen(&p, c->listen);
	selfcheck_dashboard(&p, c->static_dir);
	return preflight_finish(&p, "tally-queryd");
}
