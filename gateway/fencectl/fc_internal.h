/*
 * Declarations shared by fencectl's files: the HTTP client (fc_http.c), the subcommands
 * (fc_commands.c, fc_lock.c). Never installed. The command line lives in fc_args.h.
 */
#ifndef FC_INTERNAL_H
#define FC_INTERNAL_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>
#include <jansson.h>

#include "fc_args.h"

#define FC_REQUEST_TIMEOUT_MS 10000 /* one attempt of one request, without a lock wait */
#define FC_RETRY_BUDGET_MS 2000     /* retries of transient failures end by then at least */
#define FC_ID_LEN 32                /* hex characters of fc__random_id */

typedef struct fc_client {
    CURL *curl;
    char *base_url;        /* without a trailing '/' */
    char *auth_header;     /* "Authorization: Bearer ...", or NULL; wiped before it is freed */
    int verbose;
    const char *cacert;    /* --cacert, or NULL: the system's CAs */
    const char *cert, *key; /* --cert and --key, or NULL: no client certificate */
    const char *what;      /* "lock orders": what error lines are about */
    /* When non-NULL, a transfer stops as soon as *abort_flag is non-zero (a signal arrived
     * while fencectl waited for a lock). */
    volatile sig_atomic_t *abort_flag;
} fc_client;

typedef struct fc_request {
    const char *method;
    const char *path;          /* "/lock", "/resources/orders" */
    const char *idem_key;      /* sent as Idempotency-Key, or NULL */
    const char *content_type;  /* of body, or NULL */
    const char *fencing_token; /* sent as Fencing-Token, or NULL */
    const void *body;          /* may be NULL */
    size_t len;
    int64_t timeout_ms;        /* of one attempt */
    /* 1 when sending it again after an answer was lost is safe (GET, an Idempotency-Key);
     * otherwise only attempts that never connected are repeated. */
    int resend_safe;
    int64_t retry_until_ms;    /* fc__now_ms() before which another attempt may start; 0: one */
} fc_request;

typedef struct fc_response {
    long status;               /* the HTTP status, 0 when no answer came */
    int connected;             /* 0 when the request surely never reached the gateway */
    char transport_error[CURL_ERROR_SIZE + 64]; /* why no answer came */
    char *body;                /* malloc'd, NUL-terminated (also for binary values) */
    size_t len;
    json_t *json;              /* the body when it is a JSON object, else NULL */
    char content_type[160];
    char fencing_token[32];
} fc_response;

/* Monotonic clock in milliseconds. */
int64_t fc__now_ms(void);

/* Fills buf (FC_ID_LEN + 1 bytes) with 128 random bits in hex, from /dev/urandom.
 * Returns 0, or -1 when no randomness could be read. */
int fc__random_id(char *buf);

/* Sets up c from o, $FENCEGATE_URL and $FENCEGATE_AUTH_TOKEN_FILE: checks the URL, reads
 * the token file. Returns 0, or -1 with a one-line reason in err (which never contains the
 * token). Free with fc__client_free() in both cases. */
int fc__client_init(fc_client *c, const fc_options *o, char *err, size_t errlen);
void fc__client_free(fc_client *c);

/* Sends rq and fills *r (free it with fc__response_free). Retries transient failures (no
 * answer, 502/503/504) with a doubling backoff while attempts can start before
 * rq->retry_until_ms; the last failure stays in *r. */
void fc__request(fc_client *c, const fc_request *rq, fc_response *r);

/* POSTs body as JSON (steals the reference to body) to path. */
void fc__post_json(fc_client *c, const char *path, json_t *body, const char *idem_key,
                   int64_t timeout_ms, int64_t retry_until_ms, fc_response *r);

void fc__response_free(fc_response *r);

/* The "error" code of an error answer ("locked"), or "" when there is none. */
const char *fc__error_code(const fc_response *r);

/* An integer field of r->json, or -1 when absent. */
int64_t fc__json_int(const fc_response *r, const char *field);

/* Prints the one-line error about a failed r ("fencectl: lock orders: ...") on stderr and
 * returns the exit code for it (FC_EXIT_*). */
int fc__report(const fc_client *c, const fc_response *r);

/* The subcommands. Each returns fencectl's exit code. */
int fc__cmd_lock(fc_client *c, const fc_options *o);
int fc__cmd_unlock(fc_client *c, const fc_options *o);
int fc__cmd_renew(fc_client *c, const fc_options *o);
int fc__cmd_write(fc_client *c, const fc_options *o);
int fc__cmd_read(fc_client *c, const fc_options *o);
int fc__cmd_status(fc_client *c, const fc_options *o);
int fc__cmd_ls(fc_client *c, const fc_options *o);
int fc__cmd_release(fc_client *c, const fc_options *o);

#endif
