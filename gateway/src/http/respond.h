/*
 * Building answers and reading request input (respond.c): the single error helper, JSON
 * responses, and the field checks every operation shares.
 */
#ifndef GATEWAY_RESPOND_H
#define GATEWAY_RESPOND_H

#include <stdint.h>

#include <jansson.h>
#include <microhttpd.h>

#include "locklib/locklib.h"

#include "http/request.h"

/* Queues a JSON response (body is stolen and freed). Returns the MHD result. */
enum MHD_Result gw__send_json(gw_request *req, unsigned int status, json_t *body);
/* Builds the response {"error": code, "message": ...} plus the fields of extra (stolen, may
 * be NULL), for callers that add headers (Allow, Retry-After) before gw__queue(). Every
 * error body is built here. NULL on allocation failure. */
struct MHD_Response *gw__error_response(const char *code, json_t *extra, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* gw__error_response() and gw__queue() in one call: the usual way to answer an error. */
enum MHD_Result gw__send_error(gw_request *req, unsigned int status, const char *code,
                               json_t *extra, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Queues an already built response (the reference is released). */
enum MHD_Result gw__queue(gw_request *req, unsigned int status, struct MHD_Response *resp);

/* Records whether Redis answered (fencegate_redis_up) from a call's status. */
void gw__note_redis(gw_rt *rt, lk_status st);
/* Maps a locklib error status to an HTTP error answer; why (for the log) is the call's
 * reason, lk_errstr() or lk_call.err. */
enum MHD_Result gw__send_lk_error(gw_request *req, const char *why, lk_status st);

/* Parses req->body as a JSON object into *root. On failure queues the 400 and returns -1
 * with *result set to the MHD result. */
int gw__parse_object(gw_request *req, json_t **root, enum MHD_Result *result);
/* Refuses a body with a member not in known (NULL-terminated): a typo ("tll_ms") would
 * otherwise silently take a default, and a newer client's field would be silently ignored.
 * Returns 0, or -1 after queuing the 400 naming the first unknown member. */
int gw__fields_known(gw_request *req, json_t *root, const char *const *known,
                     enum MHD_Result *result);
/* Reads a string field that must be a valid name: the field "resource" follows the resource
 * rules, any other field the owner rules. When not required, an absent field leaves *out
 * NULL; null is a wrong type. *out points into root. Returns 0, or -1 after queuing the 400. */
int gw__field_name(gw_request *req, json_t *root, const char *field, int required,
                   const char **out, enum MHD_Result *result);
/* Reads an optional integer field in [min, max]; def when absent (null is a wrong type).
 * Returns 0 or -1 after queuing the 400. */
int gw__field_int(gw_request *req, json_t *root, const char *field, int64_t def, int64_t min,
                  int64_t max, int64_t *out, enum MHD_Result *result);
/* Reads the optional Idempotency-Key header. Returns 0 (*key NULL when absent) or -1 after
 * queuing the 400. */
int gw__idempotency_key(gw_request *req, const char **key, enum MHD_Result *result);

/* Validates req->param as a resource name; queues the 400 and returns -1 when it is not. */
int gw__path_resource(gw_request *req, enum MHD_Result *result);

/* 403 forbidden unless the request's client may do its route's operation (the route's
 * scope) on resource; NULL: on some resource. A route whose resource is in its body calls it
 * once the name is parsed (args.c); path routes are checked before their body (intake.c).
 * Returns 0, or -1 after queuing the 403, which names the operation and the resource. Without
 * authentication every request passes. (auth.c) */
int gw__authorize(gw_request *req, const char *resource, enum MHD_Result *result);

#endif
