/* api: the JSON endpoints of docs/api.md, each a function from validated parameters
 * and the calling thread's database connection to a status and a JSON body. Runs on
 * the MHD thread serving the request; knows nothing of HTTP beyond status codes. */
#ifndef QUERYD_API_H
#define QUERYD_API_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "conn.h"
#include "params.h"

/* An answer: status and body. The caller starts with body NULL and owns what is left
 * in it (NULL only when out of memory). */
struct api_reply {
	unsigned status;
	cJSON *body;
};

/* Fills r with {"error": msg, "param": param (when not NULL)} and returns -1. */
int api_error(struct api_reply *r, unsigned status, const char *msg, const char *param);

/* Each fills r and returns 0 on success, -1 with an error reply (400, 404, 503). */
int api_health(struct conn *c, int serves_data, struct api_reply *r);
/* now: unix seconds, for which days of a summary by key are kept (daycache.h). */
int api_summary(struct conn *c, const struct params *p, int64_t now, struct api_reply *r);
int api_requests(struct conn *c, const struct params *p, struct api_reply *r);
int api_request_one(struct conn *c, const char *request_id, struct api_reply *r);
int api_keys(struct conn *c, int64_t now, struct api_reply *r);
int api_teams(struct conn *c, int64_t now, struct api_reply *r);
int api_models(struct conn *c, int64_t now, struct api_reply *r);
/* control_path NULL: no agent to ask (a PostgreSQL store), the stored counters only. */
int api_live(struct conn *c, const char *control_path, struct api_reply *r);

/* Turns p->key and p->team (names) into p->key_id and p->team_id; an unknown name is a
 * 400 naming key or team. */
int api_resolve_names(struct conn *c, struct params *p, struct api_reply *r);

#endif
