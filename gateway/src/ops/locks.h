/*
 * POST /lock and GET /locks/{resource} (locks.c).
 */
#ifndef GATEWAY_LOCKS_H
#define GATEWAY_LOCKS_H

#include "http/request.h"

extern const gw_op gw__op_lock;
extern const gw_op gw__op_lock_status;
/* How the fence sends /lock attempts and tells them a HELD answer (fence.h), for
 * gw__fence_init(). */
extern const gw_fence_ops gw__lock_fence_ops;
/* For an /unlock of resource, between gw__pipe_hold() and gw__pipe_flush() on srv->pipe,
 * right after submitting its release: sends the attempt of a waiter parked on resource
 * here, if any, so that it follows the release in the same batch (locks.c, "Hand-offs").
 * Returns 1 when it did: the release's answer must then reach gw__wait_handoff_settled(). */
int gw__lock_handoff(gw_server *srv, const char *resource);

#endif
