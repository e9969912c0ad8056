/*
 * POST /unlock and POST /renew (owner_calls.c).
 */
#ifndef GATEWAY_OWNER_CALLS_H
#define GATEWAY_OWNER_CALLS_H

#include "http/request.h"

extern const gw_op gw__op_unlock;
extern const gw_op gw__op_renew;

#endif
