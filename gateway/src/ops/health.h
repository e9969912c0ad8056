/*
 * GET /healthz, GET /livez, GET /readyz and GET /metrics (health.c).
 */
#ifndef GATEWAY_HEALTH_H
#define GATEWAY_HEALTH_H

#include "http/request.h"

extern const gw_op gw__op_healthz;
extern const gw_op gw__op_livez;
extern const gw_op gw__op_readyz;
extern const gw_op gw__op_metrics;

#endif
