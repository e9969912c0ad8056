/*
 * POST /lock and GET /locks/{resource} (locks.c).
 */
#ifndef GATEWAY_LOCKS_H
#define GATEWAY_LOCKS_H

#include "request.h"

extern const gw_op gw__op_lock;
extern const gw_op gw__op_lock_status;
/* How the fence sends /lock attempts and tells them a HELD answer (fence.h), for
 * gw__fence_init(). */
extern const gw_fence_ops gw__lock_fence_ops;

#endif
