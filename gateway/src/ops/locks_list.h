/*
 * GET /locks: the held locks, paged in name order (locks_list.c).
 */
#ifndef GATEWAY_LOCKS_LIST_H
#define GATEWAY_LOCKS_LIST_H

#include "http/request.h"

extern const gw_op gw__op_locks_list;

#endif
