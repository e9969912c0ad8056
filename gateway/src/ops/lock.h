/*
 * POST /lock (lock.c, with lock_answer.c and lock_attempt.c).
 */
#ifndef GATEWAY_LOCK_H
#define GATEWAY_LOCK_H

#include "http/request.h"

extern const gw_op gw__op_lock;

#endif
