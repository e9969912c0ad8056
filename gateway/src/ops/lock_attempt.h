/*
 * The attempts of POST /lock (lock_attempt.c): how the fence sends them, and the hand-off
 * that sends one behind an /unlock's release.
 */
#ifndef GATEWAY_LOCK_ATTEMPT_H
#define GATEWAY_LOCK_ATTEMPT_H

#include "core/fence.h"
#include "rt/runtime.h"

/* How the fence sends /lock attempts and tells them a HELD answer (fence.h), for
 * gw__fence_init(). */
extern const gw_fence_ops gw__lock_fence_ops;
/* For an /unlock of resource, between gw__pipe_hold() and gw__pipe_flush() on rt->pipe,
 * right after submitting its release: sends the attempt of a waiter parked on resource
 * here, if any, so that it follows the release in the same batch (lock_attempt.c,
 * "Hand-offs"). release (not yet run: the batch is held), when not NULL, is then made to
 * hand the lock on in its script, with the floor of that attempt's turn; its done must
 * count res.handed_token (gw__fence_count) before that attempt's answer passes the stripe
 * on. Returns 1 when it sent one: the release's answer must then reach
 * gw__wait_handoff_settled(). */
int gw__lock_handoff(gw_rt *rt, const char *resource, lk_call *release);
/* After a shared grant of resource that marked it wanted: this gateway's parked waiters
 * there may join. The first is handed an attempt (gw__lock_handoff, no release behind it);
 * a set first in line, which is never handed one, is woken instead (gw__wait_kick_set). A
 * shared request granted so hands on again, so the chain goes through sets as well. */
void gw__lock_hand_on(gw_rt *rt, const char *resource);

#endif
