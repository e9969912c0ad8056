/*
 * The workloads of the comparison benchmark, each an lg_workload for tests/bench/loadgen.h:
 * what every connection sends and how its answers are judged. Names carry a tag unique to
 * the phase, so no phase ever meets a lock left over by another.
 */
#ifndef FG_BENCH_COMPARE_WORK_H
#define FG_BENCH_COMPARE_WORK_H

#include "loadgen.h"

#define CW_LEASE_MS 30000     /* lease of every lock in the pair workloads, both sides */
#define CW_WAIT_MS 10000      /* wait_ms of a contended /lock */
#define CW_WRITER_TTL_MS 600000
#define CW_VALUE_BYTES 256
#define CW_ETCD_LEASE_S 60

typedef struct cw_ctx {
    char tag[32];        /* unique per phase, part of every name */
    int contended;       /* 1: every connection on one name */
    int fair;            /* with contended: the /lock asks for a fair (FIFO) lock */
    int first_owner;     /* connection i's owner is number first_owner + i: runs that share
                          * a resource at once (several gateways) need distinct owners */
    char sha_acquire[41];/* raw Redis: SHA1 of the generated acquire.lua */
    char sha_release[41];
} cw_ctx;

/* GET / against the trivial server: one unit per answer. */
void cw_null(lg_workload *w, cw_ctx *ctx);

/* fencegate POST /lock then POST /unlock, each connection with its own owner; on its own
 * resource, or on one shared resource with wait_ms CW_WAIT_MS when ctx->contended. */
void cw_gateway_pairs(lg_workload *w, cw_ctx *ctx);

/* fencegate: each connection locks its own resource once (CW_WRITER_TTL_MS), then PUTs
 * CW_VALUE_BYTES with its Fencing-Token over and over: one unit per write. */
void cw_gateway_writes(lg_workload *w, cw_ctx *ctx);

/* fencegate: POST /lock, a PUT of CW_VALUE_BYTES with its token, POST /unlock, on the
 * connection's own resource: one unit per cycle, and the /lock on its own as the op. */
void cw_gateway_cycles(lg_workload *w, cw_ctx *ctx);

/* Redis: EVALSHA of locklib's acquire and release scripts with the keys and arguments
 * lk_acquire and lk_release pass (locklib/src/calls.c), no idempotency key, floor 0. */
void cw_raw_pairs(lg_workload *w, cw_ctx *ctx);

/* etcd v3 HTTP API: one lease per connection, then lock + unlock pairs under it. */
void cw_etcd_pairs(lg_workload *w, cw_ctx *ctx);

#endif
