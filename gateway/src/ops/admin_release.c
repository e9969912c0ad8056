/*
 * POST /admin/release {"resource", "reason"}: an operator frees a lock whoever holds it, and
 * fences the holder (core/fence.c gw__fence_force: a token above the holder's is burned in
 * Redis and made durable in the store and the ledger before the answer). The right it needs
 * is "admin" (with the single --auth-token-file token, that token). The work is a Redis
 * call and a store commit, so it runs on a side thread (pipe.c), never a loop thread. Each
 * forced release is logged with its reason and the client's address (never an owner) and
 * counted in fencegate_admin_release_total.
 */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "http/offload.h"
#include "http/respond.h"
#include "ops/admin_release.h"
#include "rt/log.h"
#include "rt/redis_client.h"

#define REASON_MAX 500

/* A forced release on the side pipeline. Freed at completion. */
struct gw_admin_release {
    gw_job job;
    gw_rt *rt;
    char resource[LK_RESOURCE_MAX + 1];
    char reason[REASON_MAX + 1];  /* printable_reason() of the client's text */
    char client[160];             /* the client's name (with --clients) and address */
    gw_forced out;
    char err[256];                /* lk_errstr() of the side thread's handle, "" for none */
};

/* The reason as logged: printable ASCII and spaces, anything else '?', so a reason cannot
 * forge or split a log line. */
static void printable_reason(char *dst, size_t len, const char *src)
{
    size_t i = 0;
    for (; src[i] != '\0' && i + 1 < len; i++) {
        unsigned char ch = (unsigned char)src[i];
        dst[i] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
    }
    dst[i] = '\0';
}

/* The client's numeric address, or "unknown". */
static void client_of(struct MHD_Connection *conn, char *buf, size_t len)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    snprintf(buf, len, "unknown");
    if (ci != NULL && ci->client_addr != NULL) {
        socklen_t alen = ci->client_addr->sa_family == AF_INET6
                             ? (socklen_t)sizeof(struct sockaddr_in6)
                             : (socklen_t)sizeof(struct sockaddr_in);
        if (getnameinfo(ci->client_addr, alen, buf, (socklen_t)len, NULL, 0, NI_NUMERICHOST) !=
            0) {
            snprintf(buf, len, "unknown");
        }
    }
}

static void release_work(gw_job *job)
{
    struct gw_admin_release *ar = job->arg;
    gw_rt *rt = ar->rt;
    lk_client *c = gw__client(rt);

    if (c == NULL) {
        ar->out.lk = LK_ENOMEM;
        return;
    }
    gw__fence_force(&rt->fence, c, ar->resource, &ar->out);
    gw__note_redis(rt, ar->out.lk);
    if (ar->out.lk >= LK_EINVAL) {
        snprintf(ar->err, sizeof ar->err, "%s", lk_errstr(c));
    }
    if (ar->out.lk == LK_RELEASED) {
        /* Logged once Redis freed it, whatever the store says next: the lock is gone. */
        gw__log_event(rt->cfg, "warn",
                      "forced release of %s by client %s: token %lld fenced by %lld%s; "
                      "reason: %s",
                      ar->resource, ar->client, (long long)ar->out.token,
                      (long long)ar->out.fenced_by,
                      ar->out.store == STORE_OK ? "" : " (the store did not record it)",
                      ar->reason);
    }
}

static enum MHD_Result release_start(gw_request *req)
{
    static const char *const known[] = {"resource", "reason", NULL};
    enum MHD_Result result = MHD_YES;
    json_t *root = NULL;
    const char *resource = NULL;

    if (gw__parse_object(req, &root, &result) != 0) {
        return result;
    }
    if (gw__fields_known(req, root, known, &result) != 0 ||
        gw__field_name(req, root, "resource", 1, &resource, &result) != 0 ||
        gw__authorize(req, resource, &result) != 0) {
        json_decref(root);
        return result;
    }
    json_t *why = json_object_get(root, "reason");
    const char *reason = json_is_string(why) ? json_string_value(why) : NULL;
    if (reason == NULL || reason[0] == '\0' || strlen(reason) > REASON_MAX) {
        json_decref(root);
        return gw__send_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request",
                              json_pack("{s:s}", "field", "reason"),
                              "\"reason\" must be a string of 1..%d bytes saying why the lock "
                              "is forced free (it is logged)", REASON_MAX);
    }
    struct gw_admin_release *ar = calloc(1, sizeof *ar);
    if (ar != NULL) {
        ar->rt = req->rt;
        snprintf(ar->resource, sizeof ar->resource, "%s", resource);
        printable_reason(ar->reason, sizeof ar->reason, reason);
        char addr[64];
        client_of(req->conn, addr, sizeof addr);
        const char *name = req->client != NULL ? req->client->name : NULL;
        snprintf(ar->client, sizeof ar->client, "%s%s%s", name != NULL ? name : "",
                 name != NULL ? " at " : "", addr);
    }
    json_decref(root);
    return gw__pipe_offload(req, req->rt->side, ar, ar != NULL ? &ar->job : NULL,
                            release_work);
}

static enum MHD_Result release_resumed(gw_request *req)
{
    const struct gw_admin_release *ar = req->op_state;
    gw_rt *rt = req->rt;

    if (ar->out.lk == LK_NOT_OWNER && ar->out.store == STORE_OK) {
        atomic_fetch_add(&rt->metrics.admin_release[1], 1);
        return gw__send_json(req, MHD_HTTP_OK, json_pack("{s:s, s:b}", "resource",
                                                          ar->resource, "released", 0));
    }
    if (ar->out.lk != LK_RELEASED) {
        if (ar->out.store != STORE_OK) {
            return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable",
                                  NULL, "storage did not answer (%s); nothing was released",
                                  store_status_name(ar->out.store));
        }
        return gw__send_lk_error(req, ar->err[0] != '\0' ? ar->err : NULL, ar->out.lk);
    }
    if (ar->out.store != STORE_OK) {
        /* Freed in Redis, whose counter fences the holder, but not durably: say so. */
        return gw__send_error(
            req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable",
            json_pack("{s:s, s:b, s:I}", "resource", ar->resource, "released", 1,
                      "fenced_token", (json_int_t)ar->out.token),
            "the lock was released in Redis, but storage may not have recorded the fence "
            "(%s): the holder's token is refused while Redis keeps its counter",
            store_status_name(ar->out.store));
    }
    atomic_fetch_add(&rt->metrics.admin_release[0], 1);
    return gw__send_json(req, MHD_HTTP_OK,
                         json_pack("{s:s, s:b, s:I, s:I}", "resource", ar->resource,
                                   "released", 1, "fenced_token", (json_int_t)ar->out.token,
                                   "superseded_by", (json_int_t)ar->out.fenced_by));
}

const gw_op gw__op_admin_release = {release_start, release_resumed, NULL};
