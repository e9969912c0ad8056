/*
 * The fault workload's request layer (fg_workload, workload.c): one client process's HTTP
 * requests to the gateway, each recorded as one history line (history.h). Every wl_ call that
 * makes a request fills an fh_op with its times (CLOCK_MONOTONIC, just before and after the
 * transfer), status (0 with error "curlN" when no answer came), error, token and version,
 * appends it to the client's history descriptor and returns it by value: nothing to free.
 */
#ifndef FG_FAULTS_WL_CLIENT_H
#define FG_FAULTS_WL_CLIENT_H

#include <stdint.h>

#include <curl/curl.h>

#include "history.h"

#define RESOURCES 3        /* the workload's resources, PREFIX-0 .. PREFIX-2 */
#define CURL_GRACE_MS 6000 /* a request may take wait_ms + 5 s; we give up 1 s later */

typedef enum run_mode {
    MODE_NONE,
    MODE_PAUSE,
    MODE_PAUSE_LOCKED,
    MODE_STEAL,
    MODE_WATCHDOG,
    MODE_HERD,
    MODE_SHARED,
    MODE_TRANSFERS,
    MODE_SESSIONS
} run_mode;

typedef struct conf {
    const char *url;
    const char *prefix;
    long ops;         /* lock attempts per process */
    int64_t deadline; /* CLOCK_MONOTONIC ns */
    run_mode mode;
    int redis_port;
    const char *redis_password;
    long herd_waiters;
    int accounts;      /* transfers: how many accounts */
    int64_t herd_deadline; /* CLOCK_MONOTONIC ns, set when the run starts */
    char stop_path[512];   /* the run ends early once this file exists */
} conf;

typedef struct client {
    char name[16];
    CURL *curl;
    int fd;
    uint64_t rng;
    long seq;
    long long last_token[RESOURCES]; /* contenders: the last token granted, for stale writes */
} client;

typedef struct reply {
    char body[4096];
    size_t len;
    long long header_token;
    long long etag;
} reply;

/* A random number from lo to hi, both included, from c's own generator. */
long wl_rand_between(client *c, long lo, long hi);

/* After an operation that got no answer or a 503, a 20 ms pause (see wl_client.c). */
void wl_back_off(const fh_op *op);

/* Opens (creates, appends to) the history file; returns its descriptor or -1 (printed). */
int wl_open_history(const char *path);

/* Sets up client c named name, writing to the history descriptor fd, with its own curl easy
 * handle (the caller frees it with curl_easy_cleanup(c->curl)). Returns 0, or -1 if curl
 * could not make one. */
int wl_client_init(client *c, const char *name, int fd, uint64_t seed);

/* Appends op to the history descriptor fd as one line (history.h). */
void wl_append_line(int fd, const fh_op *op);

/* Appends a mark (event) naming a resource, an owner and its ttl_ms to fd. */
void wl_holder_mark(int fd, const char *resource, const char *owner, long ttl_ms,
                    const char *event);

/* Lock (POST /lock by a new owner of c's), renew or unlock (kind, of grant's lock), write
 * (PUT with token in Fencing-Token) and read (GET; kind FH_READ or FH_FINAL): one request
 * each, recorded and (but for the read) returned (see the top of this file). */
fh_op wl_lock(client *c, const conf *cf, const char *resource, long ttl_ms, long wait_ms,
              unsigned flags);
/* Locks names[0..n) with one POST /lock of the set ("resources"; "mode": "shared" with
 * FH_F_SHARED in flags), for a new owner of c's, waiting wait_ms: with the lease ttl_ms, or
 * in session[0] (its id; session[1] its label) when session is not NULL. Fills ops[0..n) as
 * n lock lines of one request (its times, its status and error; each its own resource and
 * token, the set's owner; in a session, body "session:LABEL"), appended to the history, as
 * if each resource had been locked alone meanwhile. */
void wl_lock_set(client *c, const conf *cf, const char *const *names, size_t n, long ttl_ms,
                 long wait_ms, unsigned flags, const char *const session[2], fh_op *ops);
fh_op wl_owner_call(client *c, const conf *cf, fh_kind kind, const fh_op *grant,
                    unsigned flags);
fh_op wl_write(client *c, const conf *cf, const char *resource, long long token,
               const char *owner, unsigned flags);
void wl_read(client *c, const conf *cf, const char *resource, fh_kind kind);
/* A fenced read (FH_FENCED_READ): GET with token in Fencing-Token, recorded with that token
 * and flags. */
void wl_fenced_read(client *c, const conf *cf, const char *resource, long long token,
                    unsigned flags);

/* The parts of a request for callers that drive curl themselves (the herd's multi handle):
 * wl_lock_op and wl_owner_op fill op and its JSON body (len bytes) for a lock, or for a
 * renew or unlock (kind) of grant's lock; wl_owner_path is that request's path;
 * wl_http_setup sets curl up for op into rp and returns the header list, which the caller
 * frees with curl_slist_free_all() after the transfer; wl_http_result fills op's status and
 * error from the transfer's outcome rc; wl_parse_json reads error, token (unless keep_token)
 * and version from the answer into op. */
void wl_lock_op(fh_op *op, client *c, const char *resource, long ttl_ms, long wait_ms,
                unsigned flags, char *body, size_t len);
void wl_owner_op(fh_op *op, client *c, fh_kind kind, const fh_op *grant, unsigned flags,
                 char *body, size_t len);
const char *wl_owner_path(fh_kind kind);
struct curl_slist *wl_http_setup(CURL *curl, const conf *cf, const fh_op *op,
                                 const char *method, const char *path, const char *body,
                                 long long token, reply *rp);
void wl_http_result(CURL *curl, CURLcode rc, fh_op *op);
void wl_parse_json(const reply *rp, fh_op *op, int keep_token);

#endif
