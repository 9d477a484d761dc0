/* assets: static files (see assets.h). Any MHD thread. */
#include "assets.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hash.h"

#define ASSETS_PATH_MAX 256

static const char *assets_content_type(const char *path)
{
	static const struct { const char *ext, *type; } types[] = {
		{ ".html", "text/html; charset=utf-8" }, { ".js", "text/javascript; charset=utf-8" },
		{ ".css", "text/css; charset=utf-8" }, { ".svg", "image/svg+xml" },
		{ ".png", "image/png" }, { ".ico", "image/x-icon" },
		{ ".json", "application/json; charset=utf-8" }, { ".map", "application/json" },
		{ ".txt", "text/plain; charset=utf-8" }, { ".woff2", "font/woff2" },
	};
	size_t n = strlen(path), i, e;

	for (i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		e = strlen(types[i].ext);
		if (n > e && strcmp(path + n - e, types[i].ext) == 0)
			return types[i].type;
	}
	return "application/octet-stream";
}

/* The relative file path of a URL path, or NULL if it cannot name a file. */
static const char *assets_path(const char *url)
{
	const char *p;
	size_t n;

	if (url[0] != '/')
		return NULL;
	if (strcmp(url, "/") == 0)
		return "index.html";
	url++;
	n = strlen(url);
	if (n == 0 || n >= ASSETS_PATH_MAX || url[n - 1] == '/')
		return NULL;
	for (p = url; *p; p++) {
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || *p == '.' || *p == '_' || *p == '/' || *p == '-'))
			return NULL;
		/* each component starts with neither '/' (empty) nor '.' (.., hidden) */
		if ((p == url || p[-1] == '/') && (*p == '/' || *p == '.'))
			return NULL;
	}
	return url;
}

static struct MHD_Response *assets_embedded(const char *path, char *etag, size_t etaglen)
{
	size_t i;

	for (i = 0; i < assets_count; i++) {
		if (strcmp(assets_files[i].path, path) == 0) {
			snprintf(etag, etaglen, "\"%016llx\"", (unsigned long long)
			         hash_fnv1a64(HASH_FNV64_BASIS, assets_files[i].data, assets_files[i].len));
			return MHD_create_response_from_buffer(assets_files[i].len,
			                                       (void *)assets_files[i].data,
			                                       MHD_RESPMEM_PERSISTENT);
		}
	}
	return NULL;
}

/* A regular file under dir; MHD owns (and closes) the descriptor once it made the
 * response. */
static struct MHD_Response *assets_from_dir(const char *dir, const char *path, char *etag,
                                            size_t etaglen)
{
	struct MHD_Response *resp;
	char full[4096];
	struct stat sb;
	int fd;

	if ((size_t)snprintf(full, sizeof(full), "%s/%s", dir, path) >= sizeof(full))
		return NULL;
	fd = open(full, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		return NULL;
	}
	snprintf(etag, etaglen, "\"%llx-%llx\"", (unsigned long long)sb.st_mtime,
	         (unsigned long long)sb.st_size);
	resp = MHD_create_response_from_fd((uint64_t)sb.st_size, fd);
	if (!resp)
		close(fd);
	return resp;
}

struct MHD_Response *assets_response(const char *dir, const char *url, const char *if_none_match,
                                     unsigned *status)
{
	const char *path = assets_path(url), *type;
	struct MHD_Response *resp;
	char etag[64];

	if (!path)
		return NULL;
	resp = dir ? assets_from_dir(dir, path, etag, sizeof(etag))
	           : assets_embedded(path, etag, sizeof(etag));
	if (!resp)
		return NULL;
	*status = MHD_HTTP_OK;
	if (if_none_match && strcmp(if_none_match, etag) == 0) {
		MHD_destroy_response(resp);
		resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
		if (!resp)
			return NULL;
		*status = MHD_HTTP_NOT_MODIFIED;
	}
	type = assets_content_type(path);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	/* revalidated each time (cheap with the ETag): a new build is seen at once */
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, etag);
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	if (strncmp(type, "text/html", 9) == 0) {
		MHD_add_response_header(resp, "Content-Security-Policy", ASSETS_CSP);
		MHD_add_response_header(resp, "X-Frame-Options", "DENY");
	}
	return resp;
}
