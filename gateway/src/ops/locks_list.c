/*
 * GET /locks?prefix=P&limit=N&after=R: the held locks in name order, a page at a time, never
 * an owner. The listing (lk_list_locks()) SCANs every node that holds locks in bounded steps,
 * so it runs on a side thread (pipe.c), like the status read of GET /locks/{resource}: a big
 * keyspace delays this answer and no server thread. The right it needs is "read".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/offload.h"
#include "http/respond.h"
#include "ops/locks_list.h"
#include "rt/clients.h"
#include "rt/redis_client.h"
#include "rt/util.h"
#include "rt/waiters.h"

#define LIST_DEFAULT 100

/* A GET /locks on the side pipeline. Freed at completion (its entries by list_completed). */
struct gw_list_read {
    gw_job job;
    gw_rt *rt;
    char prefix[LK_RESOURCE_MAX + 1];
    char after[LK_RESOURCE_MAX + 1];
    size_t limit;
    lk_status st;
    size_t n;
    lk_lock_entry *entries;      /* limit of them */
    int *waiters;                /* this gateway's waiters of each entry */
    char next[LK_RESOURCE_MAX + 1];
    char err[256];               /* lk_errstr() of the side thread's handle, "" for none */
};

/* A query value, percent-decoded (the server leaves URLs as sent: paths are never
 * decoded, but a browser or curl --data-urlencode sends "billing%3A" for "billing:").
 * A value too long to be a name even encoded, or one that decodes to a NUL byte, is kept
 * as "\x01", which no name rule accepts. */
#define QUERY_VALUE_MAX (LK_RESOURCE_MAX * 3)

/* The query string as read by query_arg(). */
typedef struct list_query {
    const char *prefix, *limit, *after;
    const char *unknown;         /* the first unknown parameter, or NULL */
    const char *repeated;        /* the first one given twice, or NULL */
    char decoded[3][QUERY_VALUE_MAX + 1];
} list_query;

/* Decodes value into buf (QUERY_VALUE_MAX + 1 bytes) with libmicrohttpd's own decoder. */
static const char *query_decode(char *buf, const char *value)
{
    size_t len = strlen(value);

    if (len > QUERY_VALUE_MAX) {
        return "\x01";
    }
    memcpy(buf, value, len + 1);
    return MHD_http_unescape(buf) == strlen(buf) ? buf : "\x01";
}

static enum MHD_Result query_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value)
{
    list_query *q = cls;
    int i = strcmp(key, "prefix") == 0 ? 0 : strcmp(key, "limit") == 0 ? 1
            : strcmp(key, "after") == 0 ? 2 : -1;
    const char **slot = i == 0 ? &q->prefix : i == 1 ? &q->limit : i == 2 ? &q->after : NULL;
    (void)kind;
    if (slot == NULL) {
        if (q->unknown == NULL) {
            q->unknown = key;
        }
    } else if (*slot != NULL) {
        if (q->repeated == NULL) {
            q->repeated = key;
        }
    } else {
        *slot = value != NULL ? query_decode(q->decoded[i], value) : "";
    }
    return MHD_YES;
}

/* A prefix ("" allowed) or after name: the resource-name rules. */
static int name_ok(const char *s, int empty_ok)
{
    return (empty_ok && s[0] == '\0') || lk_valid_resource(s);
}

/* The one prefix a client may read under, or NULL when it has several (or none). */
static const char *sole_read_prefix(const gw_client *c)
{
    const char *only = NULL;
    for (size_t i = 0; i < c->n_allow; i++) {
        if ((c->allow[i].ops & (1u << GW_SCOPE_READ)) != 0) {
            if (only != NULL) {
                return NULL;
            }
            only = c->allow[i].prefix;
        }
    }
    return only;
}

/* With --clients, the listing scans only names the client may read: its prefix must lie
 * within one of the client's read prefixes, so that neither a listed lock nor the page's
 * next cursor names another team's resource. A client with one read prefix that asks for
 * no prefix gets that one. Returns 0 with *prefix set, or -1 after queuing the 403. */
static int scoped_prefix(gw_request *req, const char **prefix, enum MHD_Result *result)
{
    const gw_client *c = req->client;
    if (c == NULL || gw__client_allows(c, GW_SCOPE_READ, *prefix)) {
        return 0;
    }
    const char *only = sole_read_prefix(c);
    if ((*prefix)[0] == '\0' && only != NULL) {
        *prefix = only;
        return 0;
    }
    *result = gw__send_error(req, MHD_HTTP_FORBIDDEN, "forbidden",
                             json_pack("{s:s}", "operation", "read"),
                             "client '%s' may 'read' only under its own prefixes: list with "
                             "a prefix that starts with one of them", c->name);
    return -1;
}

static void list_work(gw_job *job)
{
    struct gw_list_read *lr = job->arg;
    lk_client *c = gw__client(lr->rt);

    lr->st = c != NULL ? lk_list_locks(c, lr->prefix, lr->after, lr->limit, lr->entries,
                                       &lr->n, lr->next)
                       : LK_ENOMEM;
    gw__note_redis(lr->rt, lr->st);
    if (lr->st != LK_OK && c != NULL) {
        snprintf(lr->err, sizeof lr->err, "%s", lk_errstr(c));
    }
    for (size_t i = 0; lr->st == LK_OK && i < lr->n; i++) {
        lr->waiters[i] = gw__wait_count(lr->rt->waitq, lr->entries[i].resource);
    }
}

static enum MHD_Result list_start(gw_request *req)
{
    list_query q = {0};
    long long limit = LIST_DEFAULT;

    MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, query_arg, &q);
    if (q.unknown != NULL) {
        char shown[64];
        gw__printable(shown, sizeof shown, q.unknown);
        return gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request",
                              json_pack("{s:s}", "parameter", shown),
                              "unknown query parameter '%s' (known: prefix, limit, after)",
                              shown);
    }
    if (q.repeated != NULL) {
        return gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request",
                              json_pack("{s:s}", "parameter", q.repeated),
                              "query parameter '%s' is given more than once", q.repeated);
    }
    if (q.prefix != NULL && (strlen(q.prefix) > LK_RESOURCE_MAX || !name_ok(q.prefix, 1))) {
        return gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request",
                              json_pack("{s:s}", "parameter", "prefix"),
                              "prefix must be at most %d bytes of [A-Za-z0-9._:-]",
                              LK_RESOURCE_MAX);
    }
    if (q.after != NULL && (strlen(q.after) > LK_RESOURCE_MAX || !name_ok(q.after, 1))) {
        return gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request",
                              json_pack("{s:s}", "parameter", "after"),
                              "after must be a resource name: 1..%d bytes of [A-Za-z0-9._:-]",
                              LK_RESOURCE_MAX);
    }
    if (q.limit != NULL) {
        char *end = NULL;
        limit = strtoll(q.limit, &end, 10);
        if (q.limit[0] < '0' || q.limit[0] > '9' || *end != '\0' || limit < 1 ||
            limit > LK_LIST_MAX) {
            return gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request",
                                  json_pack("{s:s}", "parameter", "limit"),
                                  "limit must be an integer from 1 to %d", LK_LIST_MAX);
        }
    }
    const char *prefix = q.prefix != NULL ? q.prefix : "";
    enum MHD_Result refused = MHD_NO;
    if (scoped_prefix(req, &prefix, &refused) != 0) {
        return refused;
    }
    struct gw_list_read *lr = calloc(1, sizeof *lr);
    if (lr != NULL) {
        lr->entries = calloc((size_t)limit, sizeof *lr->entries);
        lr->waiters = calloc((size_t)limit, sizeof *lr->waiters);
        if (lr->entries == NULL || lr->waiters == NULL) {
            free(lr->entries);
            free(lr->waiters);
            free(lr);
            lr = NULL;
        }
    }
    if (lr != NULL) {
        lr->rt = req->rt;
        lr->limit = (size_t)limit;
        snprintf(lr->prefix, sizeof lr->prefix, "%s", prefix);
        snprintf(lr->after, sizeof lr->after, "%s", q.after != NULL ? q.after : "");
    }
    return gw__pipe_offload(req, req->rt->side, lr, lr != NULL ? &lr->job : NULL, list_work);
}

static enum MHD_Result list_resumed(gw_request *req)
{
    const struct gw_list_read *lr = req->op_state;

    if (lr->st != LK_OK) {
        return gw__send_lk_error(req, lr->err[0] != '\0' ? lr->err : NULL, lr->st);
    }
    json_t *locks = json_array();
    for (size_t i = 0; locks != NULL && i < lr->n; i++) {
        const lk_lock_entry *e = &lr->entries[i];
        /* Never the owner: it is the capability to release the lock. */
        json_array_append_new(
            locks, json_pack("{s:s, s:I, s:I, s:I, s:I, s:s, s:I}", "resource", e->resource,
                             "token", (json_int_t)e->token, "holds", (json_int_t)e->holds,
                             "ttl_ms", (json_int_t)e->ttl_ms, "waiters",
                             (json_int_t)(e->queued + lr->waiters[i]), "mode",
                             e->shared ? "shared" : "exclusive", "holders",
                             (json_int_t)e->holders));
    }
    json_t *next = lr->next[0] != '\0' ? json_string(lr->next) : json_null();
    return gw__send_json(req, MHD_HTTP_OK, json_pack("{s:o?, s:o?}", "locks", locks, "next",
                                                      next));
}

static void list_completed(gw_request *req, enum MHD_RequestTerminationCode toe)
{
    struct gw_list_read *lr = req->op_state;

    (void)toe;
    free(lr->entries);
    free(lr->waiters);
    free(lr);
    req->op_state = NULL;
}

const gw_op gw__op_locks_list = {list_start, list_resumed, list_completed};
