/*
 * POST /admin/release: a forced release that fences the holder (admin_release.c).
 */
#ifndef GATEWAY_ADMIN_RELEASE_H
#define GATEWAY_ADMIN_RELEASE_H

#include "http/request.h"

extern const gw_op gw__op_admin_release;

#endif
