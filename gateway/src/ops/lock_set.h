/*
 * POST /lock, /unlock and /renew for a set of resources (lock_set.c, owner_set.c): the
 * single-resource operations hand a body with "resources" over with gw__set_start().
 */
#ifndef GATEWAY_LOCK_SET_H
#define GATEWAY_LOCK_SET_H

#include "http/args_set.h"
#include "http/request.h"

extern const gw_op gw__op_lock_set;
extern const gw_op gw__op_unlock_set;
extern const gw_op gw__op_renew_set;

/* Makes the set's operation of kind the request's (req->op) and starts it. */
enum MHD_Result gw__set_start(gw_request *req, gw_set_kind kind);

#endif
