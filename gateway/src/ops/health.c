/*
 * GET /healthz, GET /livez, GET /readyz and GET /metrics.
 *
 * /healthz and /livez say the process is up and serving; they need no dependency and no
 * auth, so an orchestrator can use either as a liveness probe (/livez is the name etcd and
 * Kubernetes use, beside /readyz). /readyz asks both dependencies: a Redis PING
 * (bounded by locklib's timeouts, so a dead Redis answers within about 2 s) and a read-only
 * storage transaction. /metrics makes the same two probes, so that fencegate_redis_up and
 * fencegate_store_up show the dependencies as they are at the scrape. Both make their calls
 * on the side pipelines (pipe.c): start suspends the request and queues the probe; its PING
 * runs on a side thread with that thread's lk_client, the storage read then on a reads
 * thread, each filling the request's probe state; resumed answers from it. A stalled Redis
 * or PostgreSQL so delays the probe's own answer, never a server thread.
 */
#include <stdlib.h>
#include <string.h>

#include "http/offload.h"
#include "http/respond.h"
#include "ops/health.h"
#include "rt/pipe.h"
#include "rt/redis_client.h"
#include "rt/util.h"

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

/* What a /readyz or /metrics probe found, filled on a side thread. Freed at completion. */
typedef struct probe {
    gw_job job;
    gw_rt *rt;
    int ready;            /* 1: /readyz, 0: /metrics (both read the store too, a second step) */
    int have_client;      /* the side thread had an lk_client: topo is filled */
    lk_status redis;
    store_status storage;
    lk_topology topo;     /* as the side thread's handle saw it after the PING */
} probe;

/* /readyz's second step, on a reads thread: the storage read. */
static void probe_store_work(gw_job *job)
{
    probe *p = job->arg;
    uint64_t highest = 0;
    p->storage = store_highest(p->rt->st, READY_PROBE_RESOURCE, &highest);
    atomic_store(&p->rt->metrics.store_up, p->storage == STORE_OK);
}

/* After /readyz's PING: the same job goes on to the reads pipeline, which resumes the
 * request (0: handed on). The store read waits behind other store reads only, never behind
 * a Redis call, and no Redis probe waits behind it. */
static int probe_to_store(gw_job *job)
{
    probe *p = job->arg;
    job->work = probe_store_work;
    job->done = NULL;
    gw__pipe_submit(p->rt->reads, job);
    return 0;
}

/* The job's work, on a side thread: the PING. */
static void probe_work(gw_job *job)
{
    probe *p = job->arg;
    lk_client *c = gw__client(p->rt);

    p->redis = c != NULL ? lk_ping(c) : LK_ENOMEM;
    if (c != NULL) {
        p->have_client = 1;
        lk_client_topology(c, &p->topo);
        gw__metrics_note_topology(&p->rt->metrics, &p->topo);
    }
    atomic_store(&p->rt->metrics.redis_up, p->redis == LK_OK);
}

/* Starts a probe: the request is suspended until the side pipeline has run it. */
static enum MHD_Result probe_start(gw_request *req, int ready)
{
    probe *p = calloc(1, sizeof *p);
    if (p != NULL) {
        p->rt = req->rt;
        p->ready = ready;
        p->job.done = probe_to_store;
    }
    return gw__pipe_offload(req, req->rt->side, p, p != NULL ? &p->job : NULL, probe_work);
}

/* {"kind", "master", "failovers", "url"[, "nodes"]} of the Redis deployment, as the probe's
 * handle saw it ("nodes" for Redlock). The URL comes redacted: the password never leaves
 * the process. */
static json_t *topology_json(gw_rt *rt, const lk_topology *topo)
{
    char url[sizeof rt->cfg->redis_url + 8];

    gw__config_redact_url(rt->cfg->redis_url, url, sizeof url);
    json_t *j = json_pack("{s:s, s:s, s:I, s:s}", "kind", lk_topology_name(topo->kind),
                          "master", topo->master, "failovers",
                          (json_int_t)atomic_load(&rt->metrics.redis_failovers), "url", url);
    if (j != NULL && topo->nnodes > 0) {
        json_object_set_new(j, "nodes", nodes_json(topo));
    }
    return j;
}

static enum MHD_Result readyz_start(gw_request *req)
{
    return probe_start(req, 1);
}

static enum MHD_Result readyz_resumed(gw_request *req)
{
    gw_rt *rt = req->rt;
    const probe *p = req->op_state;
    int redis_ok = p->redis == LK_OK;
    int storage_ok = p->storage == STORE_OK;

    if (redis_ok && storage_ok) {
        return gw__send_json(req, MHD_HTTP_OK,
                             json_pack("{s:s, s:s, s:s, s:s, s:o}", "status", "ready", "redis",
                                       "up", "storage", "up", "store", rt->store_desc,
                                       "topology", topology_json(rt, &p->topo)));
    }
    const char *failed = !redis_ok && !storage_ok ? "redis and storage"
                         : !redis_ok             ? "redis"
                                                 : "storage";
    json_t *details = json_pack("{s:s, s:s, s:s}", "redis", redis_ok ? "up" : "down",
                                "storage", storage_ok ? "up" : "down", "store",
                                rt->store_desc);
    if (details != NULL && p->have_client) {
        /* Which nodes are down or held out (Redlock) is what an operator needs here. */
        json_object_set_new(details, "topology", topology_json(rt, &p->topo));
    }
    return gw__send_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "backend_unavailable", details,
                          "%s unavailable", failed);
}

/* The probe refreshes the gauges, so a scrape sees Redis and the store as they are, not as
 * the last request saw them. */
static enum MHD_Result metrics_start(gw_request *req)
{
    return probe_start(req, 0);
}

static enum MHD_Result metrics_resumed(gw_request *req)
{
    size_t len = 0;
    const probe *p = req->op_state;

    char *text = gw__metrics_render(&req->rt->metrics, &p->topo, &len);
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
const gw_op gw__op_livez = {healthz, NULL, NULL};
const gw_op gw__op_readyz = {readyz_start, readyz_resumed, NULL};
const gw_op gw__op_metrics = {metrics_start, metrics_resumed, NULL};
