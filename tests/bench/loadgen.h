/*
 * loadgen: the load generator of the comparison benchmark (tests/bench/compare_bench.c).
 *
 * One thread, one epoll set, N keep-alive TCP connections over raw non-blocking sockets to
 * 127.0.0.1:port, exactly one request in flight per connection (a closed loop: a connection
 * sends its next request when the answer to the previous one is complete). Responses are
 * framed as HTTP/1.1 (Content-Length or chunked) or as RESP (hiredis's redisReader), so the
 * same engine drives the gateway, etcd, a trivial HTTP server and Redis itself.
 *
 * What is sent is up to a workload: a pair of callbacks that write a connection's next
 * request and judge its answer, with a private state block per connection. A "unit" is what
 * the table counts (a lock+unlock pair, or one write): the workload says which request
 * starts a unit and which answer completes it, and the engine times it, plus the first
 * operation of the unit (the lock of a pair) on its own.
 */
#ifndef FG_BENCH_LOADGEN_H
#define FG_BENCH_LOADGEN_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

typedef enum lg_proto { LG_HTTP, LG_RESP } lg_proto;

/* What a workload's on_reply answers. */
typedef enum lg_verdict {
    LG_NEXT,      /* a set-up or middle step: send the next request, time nothing */
    LG_OP_DONE,   /* the first operation of the unit is done (its latency is recorded) */
    LG_UNIT_DONE, /* the unit is complete (counted, and its latency recorded) */
    LG_FAILED     /* a wrong answer: counted as an error; the workload has reset its state */
} lg_verdict;

/* One complete answer. For HTTP, status and the (de-chunked) body; for RESP, the reply. */
typedef struct lg_reply {
    int status;
    const char *body;
    size_t body_len;
    const redisReply *resp;
} lg_reply;

typedef struct lg_workload {
    const char *name;
    lg_proto proto;
    void *ctx;          /* shared by every connection, passed back to the callbacks */
    size_t state_size;  /* bytes of per-connection state, zeroed before the first request */
    /* Writes connection conn's next request into buf (cap bytes). Sets *starts_unit to 1
     * when this request begins a timed unit. Returns its length, or -1 when it does not fit
     * or cannot be made (the run stops with an error). */
    int (*next)(void *ctx, int conn, void *state, char *buf, size_t cap, int *starts_unit);
    /* Judges the answer to the request next() wrote last. */
    lg_verdict (*on_reply)(void *ctx, int conn, void *state, const lg_reply *reply);
} lg_workload;

/* Called when the measured window opens (begin = 1) and when it closes (begin = 0). */
typedef void (*lg_window_fn)(void *arg, int begin);

typedef struct lg_result {
    double seconds;       /* length of the measured window */
    uint64_t units;       /* units completed inside the window */
    uint64_t failures;    /* LG_FAILED answers and dropped connections during the whole run */
    double rate;          /* units per second */
    double unit_p50_ms, unit_p99_ms; /* latency of a unit, from its first request sent */
    double op_p50_ms, op_p99_ms;     /* latency of the unit's first operation */
    uint64_t op_samples;
} lg_result;

/* Runs workload w over nconns connections to 127.0.0.1:port: warm_ms of warm-up (set-up
 * requests and units that are not counted), then measure_ms of measurement, then every
 * connection is closed, whatever it was waiting for. window (may be NULL) is called with
 * arg at the start and end of the measured window. Returns 0 and fills *res, or -1 with the
 * reason in err (errlen bytes): no connection possible, a request that cannot be built,
 * every connection lost. */
int lg_run(const lg_workload *w, int port, int nconns, int warm_ms, int measure_ms,
           lg_window_fn window, void *arg, lg_result *res, char *err, size_t errlen);

/* Monotonic clock in microseconds. */
int64_t lg_now_us(void);

#endif
