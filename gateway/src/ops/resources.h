/*
 * PUT /resources/{resource} and GET /resources/{resource} (resources.c).
 */
#ifndef GATEWAY_RESOURCES_H
#define GATEWAY_RESOURCES_H

#include <stdint.h>

#include "http/request.h"

extern const gw_op gw__op_resource_put;
extern const gw_op gw__op_resource_get;
extern const gw_op gw__op_resource_delete;

/* Parses a Fencing-Token header value (resources.c): a positive decimal below 2^53, digits
 * only, no leading zero, optionally surrounded by spaces and tabs (HTTP's optional whitespace
 * around a field value, which MHD may or may not have trimmed already; both sides are
 * treated alike). NULL is refused. Returns 0 with *token, or -1 leaving *token alone. */
int gw__parse_token(const char *s, uint64_t *token);

#endif
