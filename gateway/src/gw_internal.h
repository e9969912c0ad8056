/*
 * Declarations shared between the gateway's own files (the gateway-core library and
 * main.c). Never installed.
 *
 * Threads: libmicrohttpd runs an epoll thread pool that parses requests and answers them.
 * Locks, unlocks, renewals and token checks go to the Redis pipeline and token-checked
 * writes to the storage writer (pipe.c): the request is suspended meanwhile, so pool
 * threads do not wait for those Redis calls or commits. What still runs on a pool thread:
 * rare Redis calls (/metrics, /readyz, GET /locks, leaving a fair queue, giving back a hold
 * nobody will use) on its own lk_client (gw__client(), a hiredis context is not
 * thread-safe), and the token ledger's cover, a small LMDB commit once per block of
 * tokens. The store is shared:
 * storage is thread-safe. Counters in gw_metrics are atomics. The floor stripes and the
 * pipelines' queues have their own mutexes.
 */
#ifndef GATEWAY_GW_INTERNAL_H
#define GATEWAY_GW_INTERNAL_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include <jansson.h>
#include <microhttpd.h>
#include <uuid/uuid.h>

#include "locklib/locklib.h"
#include "storage/storage.h"

#ifndef FENCEGATE_VERSION
#define FENCEGATE_VERSION "0.0.0"
#endif

/* ---- Configuration (config.c) ---------------------------------------------------- */

#define GW_JSON_BODY_MAX (16 * 1024)     /* JSON request bodies over this are a 413 */
#define GW_DEFAULT_TTL_MS 30000
#define GW_MAX_WAIT_MS 60000
#define GW_DRAIN_MS 10000                /* how long SIGTERM waits for in-flight requests */
/* After a Redis call takes more than half its timeout (Redis stalled or crawling), the
 * others fail fast (503) this long, then one probes (lk_breaker_new()): a stall costs each
 * server thread about one timeout, not one per request queued on it, which keeps every
 * answer within wait_ms + 5 s. */
#define GW_BREAKER_OPEN_MS 500
/* How long past its deadline (now + wait_ms) a lock attempt may wait for its resource's
 * floor stripe lock before answering 503: bounds the queue of attempts on one resource
 * behind a slow (not stalled) Redis. */
#define GW_STRIPE_GRACE_MS 1000
#define GW_CONN_TIMEOUT_S 30             /* idle connection timeout */
/* A request must be received in full (request line, headers and body) within this many
 * seconds of its start: the connection's accept for its first request, the request line for
 * a later one on a kept-alive connection. The idle timeout above restarts with every byte, so
 * alone it does not stop a client trickling a byte a second (server.c, "Request deadlines"). */
#define GW_REQUEST_DEADLINE_S 10
/* libmicrohttpd's memory pool per connection: the request line and headers and the answer's
 * headers live in it (bodies are streamed into our own buffers). Its default, 32 KiB, is all
 * touched once a keep-alive connection has served a request, so 10,000 parked waiters would
 * cost 320 MiB. At 3 KiB a parked waiter costs under 4 KiB in all (tests/bench/handoff_bench)
 * and a request may carry about 2.5 KiB of request line and headers; libmicrohttpd refuses a
 * larger one with 431 (its own short HTML body, not our JSON: it answers before we see it). */
#define GW_CONN_MEMORY (3 * 1024)

typedef struct gw_config {
    char listen[256];            /* HOST:PORT or [V6]:PORT */
    char redis_url[1024];
    char data_dir[1024];
    char auth_token_file[1024];  /* "" when auth is off */
    size_t max_value_bytes;
    size_t map_size;             /* LMDB map size in bytes (--map-size) */
    int threads;
    int max_connections;
    int log_json;                /* 1: --log-format json */
    /* What to do instead of serving. */
    int help;
    int version;
    int routes;
    int check_config;
} gw_config;

/* Fills cfg from the environment (FENCEGATE_*), then from argv (flags override env).
 * Returns 0, or -1 with a message naming the bad flag, variable or value in err (one line of
 * printable ASCII): the caller prints it and exits 2. Never exits by itself, so fuzzers can
 * call it. */
int gw__config_parse(gw_config *cfg, int argc, char **argv, char *err, size_t errlen);

/* Prints the --help text (every flag with its environment variable) to f. */
void gw__config_usage(FILE *f, const char *argv0);

/* Reads the bearer token from the auth token file into buf (trailing whitespace stripped).
 * Returns its length, or -1 with a reason in err when the file is unreadable, empty or
 * longer than len - 1 bytes. */
long gw__config_read_token(const char *path, char *buf, size_t len, char *err, size_t errlen);

/* Resolves cfg->listen into *addr. Returns 0 or -1 with err. */
int gw__config_listen_addr(const char *listen, struct sockaddr_storage *addr, char *err,
                          size_t errlen);

/* Copies a Redis URL without its user:password part into out, for logs. */
void gw__config_redact_url(const char *url, char *out, size_t outlen);

/* ---- Routes (server.c) ------------------------------------------------------------ */

typedef enum gw_route_id {
    GW_R_LOCK,
    GW_R_UNLOCK,
    GW_R_RENEW,
    GW_R_LOCK_STATUS,
    GW_R_RESOURCE_GET,
    GW_R_RESOURCE_PUT,
    GW_R_HEALTHZ,
    GW_R_READYZ,
    GW_R_METRICS,
    GW_R_COUNT
} gw_route_id;

/* Label used for requests that matched no route (404/405). */
#define GW_R_NONE GW_R_COUNT

typedef struct gw_route {
    const char *method;
    const char *path;        /* template, e.g. "/resources/{resource}" */
    gw_route_id id;
} gw_route;

/* The served routes, GW_R_COUNT entries, in the order of gw_route_id. */
extern const gw_route gw__routes[GW_R_COUNT];

/* Matches a raw request path. Returns 200 with *route and *param (the raw text after the
 * route's prefix, "" when the template has no {resource}), 404 when no route has this path,
 * or 405 with the allowed methods ("GET, PUT") written into allow. */
int gw__route_match(const char *method, const char *path, const gw_route **route,
                   const char **param, char *allow, size_t allowlen);

/* ---- Metrics (metrics.c) ---------------------------------------------------------- */

/* Outcomes by operation. The names are the label values. */
#define GW_ACQUIRE_OUTCOMES(X)                                                            \
    X(acquired) X(reentered) X(replayed) X(locked) X(invalid) X(unavailable)              \
    X(idempotency_conflict) X(error) X(shutting_down) X(abandoned)
#define GW_RELEASE_OUTCOMES(X)                                                            \
    X(released) X(still_held) X(not_owner) X(replayed) X(invalid) X(unavailable)          \
    X(idempotency_conflict) X(error)
#define GW_RENEW_OUTCOMES(X)                                                              \
    X(renewed) X(not_owner) X(replayed) X(invalid) X(unavailable) X(idempotency_conflict)  \
    X(error)
#define GW_WRITE_OUTCOMES(X)                                                              \
    X(accepted) X(stale) X(unknown_token) X(too_large) X(full) X(invalid) X(unavailable)   \
    X(error)

#define GW_X_ACQ(name) GW_ACQ_##name,
#define GW_X_REL(name) GW_REL_##name,
#define GW_X_REN(name) GW_REN_##name,
#define GW_X_WR(name) GW_WR_##name,
typedef enum { GW_ACQUIRE_OUTCOMES(GW_X_ACQ) GW_ACQ_COUNT } gw_acquire_outcome;
typedef enum { GW_RELEASE_OUTCOMES(GW_X_REL) GW_REL_COUNT } gw_release_outcome;
typedef enum { GW_RENEW_OUTCOMES(GW_X_REN) GW_REN_COUNT } gw_renew_outcome;
typedef enum { GW_WRITE_OUTCOMES(GW_X_WR) GW_WR_COUNT } gw_write_outcome;
#undef GW_X_ACQ
#undef GW_X_REL
#undef GW_X_REN
#undef GW_X_WR

/* Why a parked waiter was woken (waiters.c). The names are the metric label values. */
#define GW_WAKE_REASONS(X) X(none) X(release) X(expiry) X(deadline) X(disconnect) X(shutdown)
#define GW_X_WAKE(name) GW_WAKE_##name,
typedef enum gw_wake { GW_WAKE_REASONS(GW_X_WAKE) GW_WAKE_COUNT } gw_wake;
#undef GW_X_WAKE
#define GW_WAKE_NONE GW_WAKE_none
#define GW_WAKE_RELEASE GW_WAKE_release
#define GW_WAKE_EXPIRY GW_WAKE_expiry
#define GW_WAKE_DEADLINE GW_WAKE_deadline
#define GW_WAKE_DISCONNECT GW_WAKE_disconnect
#define GW_WAKE_SHUTDOWN GW_WAKE_shutdown

#define GW_LATENCY_BUCKETS 14
/* Status codes counted by fencegate_http_responses_total; anything else is "other". */
#define GW_STATUS_CODES(X)                                                                \
    X(200) X(400) X(401) X(403) X(404) X(405) X(409) X(413) X(422) X(500) X(503) X(507)
#define GW_X_COUNT(code) +1
#define GW_STATUS_COUNT (0 GW_STATUS_CODES(GW_X_COUNT) + 1)

typedef struct gw_metrics {
    atomic_ullong acquire[GW_ACQ_COUNT];
    atomic_ullong release[GW_REL_COUNT];
    atomic_ullong renew[GW_REN_COUNT];
    atomic_ullong write[GW_WR_COUNT];
    atomic_llong locks_held;              /* first acquisitions - releases to zero, here */
    const lk_breaker *breaker;            /* the Redis stall breaker, for its counter */
    atomic_int redis_up;                  /* last observed state */
    atomic_ullong floor_corrections;      /* acquisitions whose counter was raised */
    atomic_ullong responses[GW_STATUS_COUNT];
    atomic_llong waiters_parked;          /* /lock requests parked, waiting for a release */
    atomic_ullong waiter_wakes[GW_WAKE_COUNT];
    atomic_int subscriber_up;             /* the release subscriber is connected */
    atomic_ullong deadline_closed;        /* connections closed for missing their request
                                           * deadline (server.c) */
    /* The pipelines (pipe.c), [0] Redis, [1] storage: batches sent and jobs in them. */
    atomic_ullong pipe_batches[2];
    atomic_ullong pipe_jobs[2];
    /* Latency histogram per route (+1 for unmatched), cumulative at output time. */
    atomic_ullong latency_bucket[GW_R_COUNT + 1][GW_LATENCY_BUCKETS + 1];
    atomic_ullong latency_sum_us[GW_R_COUNT + 1];
} gw_metrics;

void gw__metrics_observe(gw_metrics *m, int route, int status, int64_t micros);
/* Writes the Prometheus text exposition into a malloc'd string (*len bytes). NULL on
 * allocation failure. The caller frees it. */
char *gw__metrics_render(gw_metrics *m, size_t *len);

/* ---- Parked waiters (waiters.c) ---------------------------------------------------- */

struct gw_server;
typedef struct gw_waitq gw_waitq;
typedef struct gw_wres gw_wres;

#define GW_TIMER_OFF ((size_t)-1)
typedef struct gw_timer {
    int64_t at;                   /* monotonic ms */
    size_t idx;                   /* position in the heap, GW_TIMER_OFF when not armed */
    int kind;
} gw_timer;

typedef enum gw_waiter_state {
    GW_WAITER_IDLE = 0,           /* attempting, or never parked */
    GW_WAITER_PARKING,            /* queued; its thread is suspending the connection */
    GW_WAITER_SUSPENDED,          /* queued and suspended */
    GW_WAITER_WAKE_PENDING,       /* woken while PARKING: its thread resumes it */
    GW_WAITER_WOKEN               /* resumed; the handler runs again */
} gw_waiter_state;

/* The waiting part of a /lock request. Zero-initialised; owned by its request. */
typedef struct gw_waiter {
    struct gw_waiter *prev, *next; /* in its resource's queue */
    gw_wres *res;                 /* the entry it holds a reference on, NULL when none */
    struct MHD_Connection *conn;
    int fd;                       /* watched for hang-ups while suspended, else -1 */
    gw_timer timer;               /* its deadline while parked */
    gw_waiter_state state;
    gw_wake reason;               /* why it was last woken */
    uint64_t epoch;               /* its resource's epoch when the attempt began */
    int queued;
    int parked_before;            /* has been parked (suspended) at least once */
    int wake_unused;              /* woken by a release/expiry and not yet attempted */
} gw_waiter;

typedef enum gw_park {
    GW_PARKED,                    /* suspended: return MHD_YES without a response */
    GW_PARK_RETRY,                /* a release came during the attempt: attempt again now */
    GW_PARK_SHUTDOWN,             /* shutting down: answer 503 */
    GW_PARK_NOMEM                 /* answer 503 */
} gw_park;

/* Starts the waiters' thread and its Redis subscriber (Redis may be down: it reconnects).
 * Sets srv->waitq. Returns 0 or -1 with err. */
int gw__waitq_start(struct gw_server *srv, char *err, size_t errlen);
/* Wakes every parked waiter with GW_WAKE_SHUTDOWN, and every later park answers
 * GW_PARK_SHUTDOWN. Returns at once. */
void gw__waitq_shutdown(gw_waitq *wq);
/* Stops the thread and frees everything. Only after every request has completed. */
void gw__waitq_stop(gw_waitq *wq);
/* Before each attempt of a waiting /lock: takes a reference on the resource's entry (the
 * first one subscribes to its channel) and records its epoch. Returns 0, or -1 without
 * memory. */
int gw__wait_begin(gw_waitq *wq, gw_waiter *w, const char *resource);
/* Gives the waiter its place at the end of its resource's queue now, if it has none (a fair
 * waiter's attempt calls it on the pipeline thread right after its HELD answer, while its
 * stripe is still busy, so that its local place follows its place in the Redis queue).
 * No-op without a reference. */
void gw__wait_place(gw_waitq *wq, gw_waiter *w);
/* After the attempt that ends the wait (or from request completion): leaves the queue, drops
 * the reference, and passes on a wake the waiter never used. granted_ttl_ms is the lease of
 * the lock this waiter just took (the others then wait for it), or -1. No-op without a
 * reference. */
void gw__wait_end(gw_waitq *wq, gw_waiter *w, int64_t granted_ttl_ms);
/* After an attempt answered HELD with time left: parks the waiter and suspends conn (the
 * caller is the access handler of conn). deadline_ms is monotonic; hint_ms is the holder's
 * remaining lease (-1 unknown). */
gw_park gw__wait_park(gw_waitq *wq, gw_waiter *w, struct MHD_Connection *conn,
                      int64_t deadline_ms, int64_t hint_ms);
/* 0 when the client of conn has closed its side, 1 otherwise. */
int gw__conn_alive(struct MHD_Connection *conn);

/* ---- Pipelines (pipe.c) ----------------------------------------------------------- */

/* Redis pipeline threads, each with its own connection and one batch in flight. */
#define GW_PIPE_THREADS 2

typedef struct gw_pipe gw_pipe;
typedef struct gw_job gw_job;

/* One call for a pipeline: `call` for the Redis pipeline, `write` for the storage writer,
 * both owned by the submitter, which keeps the job alive until done has run (conn's request
 * owns it: a suspended request cannot complete). */
struct gw_job {
    gw_job *next;                   /* the pipeline's queue */
    lk_call *call;                  /* in: the call; out: status, result and reason */
    store_write_req *write;         /* in: the write; out: its answer */
    struct MHD_Connection *conn;    /* resumed after done, unless done returns 0 */
    /* On the pipeline thread, before the resume; may be NULL. Returns 1; 0 would mean it
     * handed the request on to someone who resumes it (then the job may be gone). */
    int (*done)(gw_job *job);
    void *arg;                      /* for done */
};

/* Starts the Redis pipeline (srv->pipe; Redis may be down: each batch reconnects) and the
 * storage writer (srv->writer). Returns 0 or -1 with err. */
int gw__pipes_start(struct gw_server *srv, char *err, size_t errlen);
/* Queues a job. The caller has suspended job->conn first. Never blocks on Redis or disk. */
void gw__pipe_submit(gw_pipe *p, gw_job *job);
/* Runs every queued job, then stops the threads. Only after every request has completed. */
void gw__pipe_stop(gw_pipe *p);

/* ---- Server state --------------------------------------------------------------- */

#define GW_FLOOR_STRIPES 1024

struct gw_lock_call;
struct gw_owner_call;
struct gw_write_call;

/* Acquisitions of the resources of one stripe run one at a time, from computing the floor
 * until the token is counted in max_token (locks.c). The mutex guards only this state. */
typedef struct gw_stripe {
    pthread_mutex_t mu;
    int busy;                            /* an acquisition is in the pipeline */
    struct gw_lock_call *first, *last;   /* acquisitions waiting for it, in arrival order */
} gw_stripe;

typedef struct gw_server {
    const gw_config *cfg;
    store *st;
    lk_options lk_opts;
    char auth_token[512];
    size_t auth_token_len;
    int auth_on;
    uuid_t owner_secret;          /* keys the owner derived from an Idempotency-Key */
    atomic_int shutting_down;     /* set by main when SIGTERM/SIGINT arrives */
    atomic_long inflight;         /* requests between their first call and completion */
    atomic_llong max_token;       /* the largest token this process has handed out */
    gw_metrics metrics;
    struct MHD_Daemon *daemon;
    gw_waitq *waitq;
    gw_stripe stripes[GW_FLOOR_STRIPES];
    gw_pipe *pipe;                /* Redis calls (pipe.c) */
    gw_pipe *writer;              /* token-checked writes (pipe.c) */
    struct gw_conns *conns;       /* open connections and their request deadlines (server.c) */
} gw_server;

/* Per-request state, created on the first call of the access handler and freed in the
 * NOTIFY_COMPLETED callback. */
typedef struct gw_request {
    gw_server *srv;
    struct MHD_Connection *conn;
    const gw_route *route;        /* NULL when no route matched */
    char method[16];
    /* The raw request path and its {resource} part point into libmicrohttpd's connection
     * memory, valid until the request completes (also while it is suspended). Print them
     * through gw__printable(): they are client bytes. */
    const char *url;
    const char *param;            /* "" when the route has no {resource} */
    int param_too_long;           /* longer than any valid name: invalid */
    int64_t start_us;
    char *body;                   /* malloc'd, NUL-terminated */
    size_t body_len;
    size_t body_cap;
    size_t body_max;
    int body_too_large;           /* over body_max: the rest is discarded, the answer 413 */
    struct gw_lock_call *lock;    /* POST /lock: its arguments and waiter (locks.c) */
    struct gw_owner_call *owner_call; /* POST /unlock and /renew in the pipeline (owner_calls.c) */
    struct gw_write_call *write_call; /* PUT /resources/{r} in the pipelines (resources.c) */
    int answered;                 /* a response was queued */
    int status;                   /* the status of that response, for log and metrics */
} gw_request;

/* Starts the daemon on cfg->listen. Returns 0 or -1 with err. */
int gw__server_start(gw_server *srv, char *err, size_t errlen);
/* Stops accepting, waits up to drain_ms for in-flight requests, stops the daemon.
 * Returns 0 when everything finished, -1 when requests were still running at the deadline
 * (the daemon is then left running: the caller exits). */
int gw__server_stop(gw_server *srv, int drain_ms);

/* This thread's locklib handle, opened on first use; NULL on allocation failure or a bad
 * URL. Closed by a thread-exit destructor. */
lk_client *gw__client(gw_server *srv);

/* Monotonic microseconds. */
int64_t gw__now_us(void);

/* Copies src into dst (len bytes) as printable ASCII for logs and messages: anything else,
 * and '"' and '\\', becomes '?'; truncated to fit. */
void gw__printable(char *dst, size_t len, const char *src);

/* ---- Responses (respond.c) ------------------------------------------------------ */

/* Queues a JSON response (body is stolen and freed). Returns the MHD result. */
enum MHD_Result gw__send_json(gw_request *req, unsigned int status, json_t *body);
/* Builds the response {"error": code, "message": ...} plus the fields of extra (stolen, may
 * be NULL), for callers that add headers (Allow, Retry-After) before gw__queue(). Every
 * error body is built here. NULL on allocation failure. */
struct MHD_Response *gw__error_response(const char *code, json_t *extra, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* gw__error_response() and gw__queue() in one call: the usual way to answer an error. */
enum MHD_Result gw__send_error(gw_request *req, unsigned int status, const char *code,
                               json_t *extra, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Queues an already built response (the reference is released). */
enum MHD_Result gw__queue(gw_request *req, unsigned int status, struct MHD_Response *resp);

/* Records whether Redis answered (fencegate_redis_up) from a call's status. */
void gw__note_redis(gw_server *srv, lk_status st);
/* Maps a locklib error status to an HTTP error answer; why (for the log) is the call's
 * reason, lk_errstr() or lk_call.err. */
enum MHD_Result gw__send_lk_error(gw_request *req, const char *why, lk_status st);

/* Counts the request headers named `name` (case-insensitive); *value gets the last one. */
int gw__header_count(struct MHD_Connection *conn, const char *name, const char **value);

/* ---- JSON field helpers (respond.c) --------------------------------------------- */

/* Parses req->body as a JSON object into *root. On failure queues the 400 and returns -1
 * with *result set to the MHD result. */
int gw__parse_object(gw_request *req, json_t **root, enum MHD_Result *result);
/* Reads a string field that must be a valid name: the field "resource" follows the resource
 * rules, any other field the owner rules. When not required, an absent field leaves *out
 * NULL; null is a wrong type. *out points into root. Returns 0, or -1 after queuing the 400. */
int gw__field_name(gw_request *req, json_t *root, const char *field, int required,
                   const char **out, enum MHD_Result *result);
/* Reads an optional integer field in [min, max]; def when absent (null is a wrong type).
 * Returns 0 or -1 after queuing the 400. */
int gw__field_int(gw_request *req, json_t *root, const char *field, int64_t def, int64_t min,
                  int64_t max, int64_t *out, enum MHD_Result *result);
/* Reads the optional Idempotency-Key header. Returns 0 (*key NULL when absent) or -1 after
 * queuing the 400. */
int gw__idempotency_key(gw_request *req, const char **key, enum MHD_Result *result);

/* ---- Endpoint arguments (locks.c) ------------------------------------------------ */

/* The arguments of POST /lock, /unlock and /renew. The names point into the parsed body or
 * the request's headers, or to owner_buf when the gateway generated the owner. */
typedef struct gw_lock_args {
    const char *resource;
    const char *owner;
    const char *idem_key;        /* NULL when the request has no Idempotency-Key */
    int64_t ttl_ms;
    int64_t wait_ms;
    int fair;
    char owner_buf[LK_OWNER_MAX + 1];
    int owner_generated;
} gw_lock_args;

/* Reads and checks the /lock arguments: "resource", optional "owner" (generated when absent,
 * see generate_owner()), "ttl_ms", "wait_ms", "fair" from root (gw__parse_object's), and the
 * Idempotency-Key header. Returns 0, or -1 after queuing the 400. */
int gw__lock_args(gw_request *req, json_t *root, gw_lock_args *a, enum MHD_Result *result);
/* Reads and checks the /unlock (renew 0) or /renew (renew 1) arguments: "resource" and
 * "owner" (both required), "ttl_ms" when renewing, and the Idempotency-Key header. Returns 0,
 * or -1 after queuing the 400. */
int gw__owner_args(gw_request *req, json_t *root, int renew, gw_lock_args *a,
                   enum MHD_Result *result);

/* ---- Handlers ------------------------------------------------------------------- */

enum MHD_Result gw__handle_lock(gw_request *req);
/* From request completion: ends the wait of a /lock and undoes an acquisition whose answer
 * did not reach the client. Frees req->lock. */
void gw__lock_completed(gw_request *req, enum MHD_RequestTerminationCode toe);
/* From request completion: frees the state of an /unlock or /renew. */
void gw__owner_call_completed(gw_request *req);
/* From request completion: frees the state of a PUT /resources/{r}. */
void gw__write_call_completed(gw_request *req);
enum MHD_Result gw__handle_unlock(gw_request *req);
enum MHD_Result gw__handle_renew(gw_request *req);
enum MHD_Result gw__handle_lock_status(gw_request *req);
enum MHD_Result gw__handle_resource_put(gw_request *req);
enum MHD_Result gw__handle_resource_get(gw_request *req);
enum MHD_Result gw__handle_healthz(gw_request *req);
enum MHD_Result gw__handle_readyz(gw_request *req);
enum MHD_Result gw__handle_metrics(gw_request *req);

/* Validates req->param as a resource name; queues the 400 and returns -1 when it is not. */
int gw__path_resource(gw_request *req, enum MHD_Result *result);

/* Parses a Fencing-Token header value (resources.c): a positive decimal below 2^53, digits
 * only, no leading zero, optionally surrounded by spaces and tabs (HTTP's optional whitespace
 * around a field value, which MHD may or may not have trimmed already; both sides are
 * treated alike). NULL is refused. Returns 0 with *token, or -1 leaving *token alone. */
int gw__parse_token(const char *s, uint64_t *token);

/* ---- Logging (log.c) ------------------------------------------------------------ */

/* One line per request on stderr: method, path, status, microseconds. Never owners,
 * headers or bodies. */
void gw__log_request(const gw_request *req, int64_t micros, enum MHD_RequestTerminationCode toe);
/* A line about the process itself (start, shutdown, dependency trouble). */
void gw__log_event(const gw_config *cfg, const char *level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
