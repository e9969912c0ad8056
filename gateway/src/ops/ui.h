/*
 * GET /ui/ and GET /ui/{file}: the status page (ui.c).
 */
#ifndef GATEWAY_UI_H
#define GATEWAY_UI_H

#include "http/request.h"

extern const gw_op gw__op_ui;

#endif
