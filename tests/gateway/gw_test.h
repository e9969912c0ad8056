/*
 * Helpers for the gateway's end-to-end tests: start the real fencegate binary (its path
 * comes from the build as FENCEGATE_BIN) against a real redis-server, speak HTTP to it with
 * libcurl, and stop it by its PID. Nothing is mocked. Waiting is always a loop on a
 * condition with a deadline.
 */
#ifndef FG_GW_TEST_H
#define FG_GW_TEST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

typedef struct gwt_proc {
    pid_t pid;
    int port;
    char url[64];        /* http://127.0.0.1:<port> */
    char dir[256];       /* private temp dir: the log, and data/ unless another was given */
    char data[300];      /* the --data directory */
    char log[300];       /* the gateway's stderr */
} gwt_proc;

/* Starts fencegate on a free port with --redis redis_url and --data data_dir (NULL: a fresh
 * dir inside p->dir), plus extra_args (NULL-terminated, may be NULL). Waits up to 15 s for
 * GET /healthz to answer 200. Fails the test (cmocka fail_msg) otherwise, printing the
 * gateway's log. */
void gwt_start(gwt_proc *p, const char *redis_url, const char *data_dir,
               const char *const *extra_args);
/* When > 0, the gateway the next gwt_start() or gwt_run() starts runs with this open-file
 * limit, soft and hard (so that the gateway cannot raise it); that call resets it to 0. */
extern int gwt_child_nofile;

/* Sends `sig`, waits up to 20 s, and returns the exit status (0..255), or -1 when it was
 * killed by a signal or had to be killed. */
int gwt_signal_wait(gwt_proc *p, int sig);

/* SIGTERM and wait (gwt_signal_wait), then remove the temp dir. Returns the exit status. */
int gwt_stop(gwt_proc *p);

/* Removes the temp dir (after the process is gone). */
void gwt_cleanup(gwt_proc *p);

/* Writes text to path (creating or truncating it). Fails the test on error. */
void gwt_write_file(const char *path, const char *text);

/* 1 when the gateway's log contains needle. */
int gwt_log_contains(const gwt_proc *p, const char *needle);

/* Waits up to 10 s for the log to contain needle; 1 when it does. The request line is
 * written when MHD completes the request, which may be just after the client has read the
 * answer. */
int gwt_log_wait(const gwt_proc *p, const char *needle);

typedef struct gwt_resp {
    long status;               /* 0 when the request failed at the transport level */
    char *body;                /* malloc'd, NUL-terminated */
    size_t len;
    json_t *json;              /* the body parsed as JSON, or NULL */
    char retry_after[32];
    char allow[64];
    char fencing_token[32];
    char etag[64];
    char content_type[160];
    char www_authenticate[64];
    char content_security_policy[96];
    char content_type_options[32];
} gwt_resp;

/* Sends one request. headers is a NULL-terminated list of "Name: value" lines (may be
 * NULL). body may be NULL. Fills *r (free it with gwt_resp_free). chunked: 1 sends the body
 * with Transfer-Encoding: chunked and no Content-Length. */
void gwt_http(const gwt_proc *p, const char *method, const char *path,
              const char *const *headers, const void *body, size_t len, int chunked,
              gwt_resp *r);

/* Shorthands: JSON body POST, and GET. */
void gwt_post(const gwt_proc *p, const char *path, const char *json, gwt_resp *r);
void gwt_get(const gwt_proc *p, const char *path, gwt_resp *r);

/* The value of an unlabelled metric line "name N", or of "name{labels} N" when name
 * includes its labels; -1 when absent. */
long long gwt_metric(const gwt_proc *p, const char *name);
/* Waits up to 15 s for metric `name` to reach `want`; fails the test when it did not. */
void gwt_await_metric(const gwt_proc *p, const char *name, long long want);

void gwt_resp_free(gwt_resp *r);

/* Fields of r->json: an integer (-1 when absent), a string ("" when absent). */
long long gwt_int(const gwt_resp *r, const char *field);
const char *gwt_str(const gwt_resp *r, const char *field);

/* The requests most tests make, answered with the HTTP status:
 *   - gwt_lock: POST /lock {resource, owner, ttl_ms 60000}; *token is the token on 200, else 0;
 *   - gwt_unlock: POST /unlock {resource, owner};
 *   - gwt_put_fenced: PUT /resources/resource with Fencing-Token: token and value as a
 *     text/plain body; the answer goes to *out when out is not NULL (free it), else is freed.
 * gwt_assert_value asserts that GET /resources/resource answers 200 with exactly value. */
long gwt_lock(const gwt_proc *p, const char *resource, const char *owner, long long *token);
long gwt_unlock(const gwt_proc *p, const char *resource, const char *owner);
long gwt_put_fenced(const gwt_proc *p, const char *resource, long long token,
                    const char *value, gwt_resp *out);
void gwt_assert_value(const gwt_proc *p, const char *resource, const char *value);
/* Asserts GET /locks/{resource}: held, in mode ("shared"/"exclusive") by holders, no owner. */
void gwt_assert_lock_mode(const gwt_proc *p, const char *resource, const char *mode,
                          long long holders);

/* Pages through GET /locks (limit per page, prefix NULL for none) to the end, asserting
 * each page's shape (no owner, seven fields an entry, at most limit entries) and that the
 * names increase across pages; writes the names, comma-separated, into out. Returns how
 * many. */
int gwt_list_all(const gwt_proc *p, const char *prefix, int limit, char *out, size_t outlen);

/* Runs fencegate with argv (NULL-terminated, without argv[0]) and env ("NAME=value",
 * NULL-terminated, may be NULL) added to the environment, without serving expectations.
 * Captures stdout and stderr into malloc'd strings. Returns the exit status, -1 if killed
 * (it is killed after 20 s). */
int gwt_run(const char *const *argv, const char *const *env, char **out, char **err);

/* Asserts status and, for errors, the "error" code, printing the body when they differ. */
#define gwt_assert_status(r, want_status, want_code) \
    gwt__assert_status((r), (want_status), (want_code), __FILE__, __LINE__)
void gwt__assert_status(const gwt_resp *r, long want_status, const char *want_code,
                        const char *file, int line);

#endif
