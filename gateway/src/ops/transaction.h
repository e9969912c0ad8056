/*
 * POST /resources (transaction.c): a fenced transaction, writes and deletes of several
 * resources, each checked against its own fencing token, committed all together or not at
 * all.
 */
#ifndef GATEWAY_TRANSACTION_H
#define GATEWAY_TRANSACTION_H

#include "http/request.h"

extern const gw_op gw__op_transaction;

#endif
