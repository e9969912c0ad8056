/*
 * GET /locks/{resource} (lock_status.c).
 */
#ifndef GATEWAY_LOCK_STATUS_H
#define GATEWAY_LOCK_STATUS_H

#include "http/request.h"

extern const gw_op gw__op_lock_status;

#endif
