/*
 * POST /lock and GET /locks/{resource} (locks.c).
 */
#ifndef GATEWAY_LOCKS_H
#define GATEWAY_LOCKS_H

#include "request.h"

extern const gw_op gw__op_lock;
extern const gw_op gw__op_lock_status;

#endif
