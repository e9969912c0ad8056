/*
 * GET /healthz, GET /readyz and GET /metrics.
 *
 * /healthz says the process is up and serving; it needs no dependency and no auth, so an
 * orchestrator can use it as a liveness probe. /readyz asks both dependencies: a Redis PING
 * on this thread's connection (bounded by locklib's timeouts, so a dead Redis answers within
 * about 2 s) and a read-only storage transaction.
 */
#include <stdlib.h>
#include <string.h>

#include "health.h"
#include "redis_client.h"
#include "respond.h"
#include "util.h"

/* A valid resource name nobody needs to own: reading its highest token exercises a read
 * transaction and nothing else. */
#define READY_PROBE_RESOURCE "_fencegate.readyz"

static enum MHD_Result healthz(gw_request *req)
{
    return gw__send_json(req, MHD_HTTP_OK, json_pack("{s:s}", "status", "ok"));
}

/* Redlock's masters: [{"addr", "counts", "held_out", "held_out_ms", "held_out_until"}],
 * held_out_until the Unix time in ms (0 when not held out). */
static json_t *nodes_json(const lk_topology *topo)
{
    json_t *nodes = json_array();
    int64_t now_ms = gw__wall_ms();

    for (int i = 0; nodes != NULL && i < topo->nnodes; i++) {
        const lk_topology_node *n = &topo->nodes[i];
        json_array_append_new(
            nodes, json_pack("{s:s, s:b, s:b, s:I, s:I}", "addr", n->addr, "counts", n->counts,
                             "held_out", n->held_out_ms > 0, "held_out_ms",
                             (json_int_t)n->held_out_ms, "held_out_until",
                             (json_int_t)(n->held_out_ms > 0 ? now_ms + n->held_out_ms : 0)));
    }
    return nodes;
}

/* {"kind", "master", "failovers", "url"[, "nodes"]} of the Redis deployment, as this
 * thread's handle sees it ("nodes" for Redlock). The URL comes redacted: the password never
 * leaves the process. */
static json_t *topology_json(gw_server *srv, const lk_client *c)
{
    lk_topology topo;
    char url[sizeof srv->cfg->redis_url + 8];

    lk_client_topology(c, &topo);
    gw__metrics_note_topology(&srv->metrics, &topo);
    gw__config_redact_url(srv->cfg->redis_url, url, sizeof url);
    json_t *j = json_pack("{s:s, s:s, s:I, s:s}", "kind", lk_topology_name(topo.kind), "master",
                          topo.master, "failovers",
                          (json_int_t)atomic_load(&srv->metrics.redis_failovers), "url", url);
    if (j != NULL && topo.nnodes > 0) {
        json_object_set_new(j, "nodes", nodes_json(&topo));
    }
    return j;
}

static enum MHD_Result readyz(gw_request *req)
{
    gw_server *srv = req->srv;
    lk_client *c = gw__client(srv);
    lk_status lst = c != NULL ? lk_ping(c) : LK_ENOMEM;
    uint64_t highest = 0;
    store_status sst = store_highest(srv->st, READY_PROBE_RESOURCE, &highest);
    int redis_ok = lst == LK_OK;
    int storage_ok = sst == STORE_OK;

    atomic_store(&srv->metrics.redis_up, redis_ok);
    if (redis_ok && storage_ok) {
        return gw__send_json(req, MHD_HTTP_OK,
                             json_pack("{s:s, s:s, s:s, s:s, s:o}", "status", "ready", "redis",
                                       "up", "storage", "up", "store", srv->store_desc,
                                       "topology", topology_json(srv, c)));
    }
    const char *failed = !redis_ok && !storage_ok ? "redis and storage"
                         : !redis_ok             ? "redis"
                                                 : "storage";
    json_t *details = json_pack("{s:s, s:s, s:s}", "redis", redis_ok ? "up" : "down",
                                "storage", storage_ok ? "up" : "down", "store",
                                srv->store_desc);
    if (details != NULL && c != NULL) {
        /* Which nodes are down or held out (Redlock) is what an operator needs here. */
        json_object_set_new(details, "topology", topology_json(srv, c));
    }
    return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", details,
                          "%s unavailable", failed);
}

static enum MHD_Result metrics(gw_request *req)
{
    size_t len = 0;
    lk_client *c = gw__client(req->srv);
    lk_topology topo;

    /* Refresh the gauge so a scrape sees Redis as it is, not as the last request saw it. */
    atomic_store(&req->srv->metrics.redis_up, c != NULL && lk_ping(c) == LK_OK);
    memset(&topo, 0, sizeof topo);
    if (c != NULL) {
        lk_client_topology(c, &topo);
        gw__metrics_note_topology(&req->srv->metrics, &topo);
    }
    char *text = gw__metrics_render(&req->srv->metrics, &topo, &len);
    if (text == NULL) {
        return gw__send_error(req, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal_error", NULL,
                              "out of memory while rendering metrics");
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8");
    return gw__queue(req, MHD_HTTP_OK, resp);
}

const gw_op gw__op_healthz = {healthz, NULL, NULL};
const gw_op gw__op_readyz = {readyz, NULL, NULL};
const gw_op gw__op_metrics = {metrics, NULL, NULL};
