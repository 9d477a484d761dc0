/* assets: the dashboard's static files, from the copy compiled into the binary
 * (build/gen/assets_data.c, made by the Makefile from build/dashboard/) or from the
 * directory given with --static. Any MHD thread; the table is read only. */
#ifndef QUERYD_ASSETS_H
#define QUERYD_ASSETS_H

#include <microhttpd.h>
#include <stddef.h>

/* One embedded file; path is relative ("index.html", "vendor/uPlot.min.css"). */
struct assets_file {
	const char *path;
	const unsigned char *data;
	size_t len;
};
extern const struct assets_file assets_files[];
extern const size_t assets_count;

/* The Content-Security-Policy of HTML pages: everything from this origin, no inline
 * script. */
#define ASSETS_CSP "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'"

/* The response for URL path url ("/" is index.html), from dir or, when dir is NULL,
 * the embedded copy: 200, or 304 when if_none_match (may be NULL) names its ETag; the
 * status goes to *status. NULL when there is no such file, or the path is not one a
 * file may have (only [A-Za-z0-9._/-], no empty or dot-leading component: no "..",
 * no hidden files, no absolute paths). */
struct MHD_Response *assets_response(const char *dir, const char *url, const char *if_none_match,
                                     unsigned *status);

#endif
