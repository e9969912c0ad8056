/*
 * /metrics in the Prometheus text format (version 0.0.4). Counters are atomics updated by
 * the loop threads; rendering reads them without a lock, so one scrape may mix values from
 * slightly different instants, as every Prometheus client library does.
 *
 * Labels are fixed vocabularies (outcome names, status codes, route templates). They never
 * carry a resource name or an owner, so the series count is bounded and nothing secret leaks.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "rt/log.h"
#include "rt/metrics.h"
#include "rt/util.h"

static const double bucket_le[GW_LATENCY_BUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                     0.025,  0.05,  0.1,    0.25,  0.5,
                                                     1,      2.5,   5,      10};

#define GW_X_CODE(code) code,
static const int status_codes[GW_STATUS_COUNT - 1] = {GW_STATUS_CODES(GW_X_CODE)};
#undef GW_X_CODE

/* The histogram bucket of a duration; GW_LATENCY_BUCKETS is +Inf. */
static int bucket_of(int64_t micros)
{
    int b = 0;
    while (b < GW_LATENCY_BUCKETS && (double)micros / 1e6 > bucket_le[b]) {
        b++;
    }
    return b;
}

void gw__metrics_observe(gw_metrics *m, int route, int status, int64_t micros)
{
    int i = 0;

    /* Every 413 of a PUT is a write refused as too large, wherever it was answered: from the
     * declared Content-Length or the streamed body before the handler runs, or by storage in
     * it (answer_write in resources.c leaves it to this one place). */
    if (route == GW_R_RESOURCE_PUT && status == MHD_HTTP_CONTENT_TOO_LARGE) {
        atomic_fetch_add(&m->write[GW_WR_too_large], 1);
    }
    while (i < GW_STATUS_COUNT - 1 && status_codes[i] != status) {
        i++;
    }
    atomic_fetch_add(&m->responses[i], 1); /* i == GW_STATUS_COUNT - 1: "other" */

    atomic_fetch_add(&m->latency_bucket[route][bucket_of(micros)], 1);
    atomic_fetch_add(&m->latency_sum_us[route], (unsigned long long)(micros > 0 ? micros : 0));
}

void gw__metrics_observe_commit(gw_metrics *m, int64_t micros)
{
    atomic_fetch_add(&m->commit_bucket[bucket_of(micros)], 1);
    atomic_fetch_add(&m->commit_sum_us, (unsigned long long)(micros > 0 ? micros : 0));
}

/* The slot of name, added when it is new and there is room; GW_METRIC_CLIENTS: "other". */
static int client_slot(gw_metrics *m, const char *name)
{
    int n = atomic_load(&m->client_count);
    for (int i = 0; i < n; i++) {
        if (strcmp(m->client_names[i], name) == 0) {
            return i;
        }
    }
    int unlocked = 0;
    while (!atomic_compare_exchange_weak(&m->client_lock, &unlocked, 1)) {
        unlocked = 0; /* another thread adds a name: a few instructions */
    }
    int slot = GW_METRIC_CLIENTS;
    n = atomic_load(&m->client_count);
    for (int i = 0; i < n && slot == GW_METRIC_CLIENTS; i++) {
        slot = strcmp(m->client_names[i], name) == 0 ? i : slot;
    }
    if (slot == GW_METRIC_CLIENTS && n < GW_METRIC_CLIENTS) {
        snprintf(m->client_names[n], sizeof m->client_names[n], "%s", name);
        atomic_store(&m->client_count, n + 1);
        slot = n;
    }
    atomic_store(&m->client_lock, 0);
    return slot;
}

void gw__metrics_client(gw_metrics *m, const char *name, int status)
{
    int c = status >= 500 ? 2 : status >= 400 ? 1 : 0;
    atomic_fetch_add(&m->client_requests[client_slot(m, name)][c], 1);
}

/* One of count's limit places, or -1. */
static int take_place(atomic_int *count, int slot, int limit)
{
    if (atomic_fetch_add(&count[slot], 1) >= limit) {
        atomic_fetch_sub(&count[slot], 1);
        return -1;
    }
    return slot;
}

int gw__metrics_client_wait_take(gw_metrics *m, const char *name, int limit)
{
    return take_place(m->client_waiting, client_slot(m, name), limit);
}

void gw__metrics_client_wait_give(gw_metrics *m, int place)
{
    if (place >= 0) {
        atomic_fetch_sub(&m->client_waiting[place], 1);
    }
}

int gw__metrics_client_conn_take(gw_metrics *m, const char *name, int limit)
{
    return take_place(m->client_conns, client_slot(m, name), limit);
}

void gw__metrics_client_conn_give(gw_metrics *m, int place)
{
    if (place >= 0) {
        atomic_fetch_sub(&m->client_conns[place], 1);
    }
}

/* A growing text buffer; on allocation failure it stops growing and `failed` is set. */
typedef struct textbuf {
    char *data;
    size_t len;
    size_t cap;
    int failed;
} textbuf;

static void put(textbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(textbuf *b, const char *fmt, ...)
{
    va_list ap;
    for (int attempt = 0; attempt < 2 && !b->failed; attempt++) {
        va_start(ap, fmt);
        int n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)n + 1;
        char *grown = realloc(b->data, cap);
        if (grown == NULL) {
            b->failed = 1;
            return;
        }
        b->data = grown;
        b->cap = cap;
    }
}

static void header(textbuf *b, const char *name, const char *type, const char *help)
{
    put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

#define GW_X_NAME(name) #name,
static const char *const acquire_names[] = {GW_ACQUIRE_OUTCOMES(GW_X_NAME)};
static const char *const release_names[] = {GW_RELEASE_OUTCOMES(GW_X_NAME)};
static const char *const renew_names[] = {GW_RENEW_OUTCOMES(GW_X_NAME)};
static const char *const write_names[] = {GW_WRITE_OUTCOMES(GW_X_NAME)};
static const char *const wake_names[] = {GW_WAKE_REASONS(GW_X_NAME)};
#undef GW_X_NAME

static void labelled(textbuf *b, const char *name, const char *help, const char *label,
                     const char *const *names, atomic_ullong *counts, int n)
{
    header(b, name, "counter", help);
    for (int i = 0; i < n; i++) {
        put(b, "%s{%s=\"%s\"} %llu\n", name, label, names[i], atomic_load(&counts[i]));
    }
}

static void outcomes(textbuf *b, const char *name, const char *help, const char *const *names,
                     atomic_ullong *counts, int n)
{
    labelled(b, name, help, "outcome", names, counts, n);
}

/* One series of a histogram: its cumulative buckets, sum and count. labels may be "". */
static void histogram(textbuf *b, const char *name, const char *labels, atomic_ullong *buckets,
                      atomic_ullong *sum_us)
{
    const char *sep = labels[0] != '\0' ? "," : "";
    unsigned long long cumulative = 0;
    for (int i = 0; i <= GW_LATENCY_BUCKETS; i++) {
        cumulative += atomic_load(&buckets[i]);
        if (i < GW_LATENCY_BUCKETS) {
            put(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, bucket_le[i],
                cumulative);
        } else {
            put(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep, cumulative);
        }
    }
    if (labels[0] != '\0') {
        put(b, "%s_sum{%s} %.6f\n", name, labels, (double)atomic_load(sum_us) / 1e6);
        put(b, "%s_count{%s} %llu\n", name, labels, cumulative);
    } else {
        put(b, "%s_sum %.6f\n", name, (double)atomic_load(sum_us) / 1e6);
        put(b, "%s_count %llu\n", name, cumulative);
    }
}

static void latency(textbuf *b, gw_metrics *m)
{
    const char *name = "fencegate_http_request_duration_seconds";
    header(b, name, "histogram", "Time from the first byte of a request to its completion.");
    for (int r = 0; r <= GW_R_COUNT; r++) {
        char labels[96];
        if (r < GW_R_COUNT) {
            snprintf(labels, sizeof labels, "method=\"%s\",route=\"%s\"", gw__routes[r].method,
                     gw__routes[r].path);
        } else {
            snprintf(labels, sizeof labels, "method=\"\",route=\"unmatched\"");
        }
        histogram(b, name, labels, m->latency_bucket[r], &m->latency_sum_us[r]);
    }
}

void gw__metrics_note_topology(gw_metrics *m, const lk_topology *topo)
{
    long long seen = atomic_load(&m->redis_failovers);
    while (topo->failovers > seen &&
           !atomic_compare_exchange_weak(&m->redis_failovers, &seen, topo->failovers)) {
    }
}

/* The topology: its kind as a label of a constant gauge, the master as another, and the
 * failovers seen. The master is host:port only: no URL, so no password. */
static void topology(textbuf *b, gw_metrics *m, const lk_topology *topo)
{
    header(b, "fencegate_redis_topology", "gauge",
           "Always 1; kind is the Redis deployment (single, sentinel, cluster, redlock).");
    put(b, "fencegate_redis_topology{kind=\"%s\"} 1\n", lk_topology_name(topo->kind));
    header(b, "fencegate_redis_master", "gauge",
           "Always 1; addr is the master the last Redis connection went to.");
    put(b, "fencegate_redis_master{addr=\"%s\"} 1\n", topo->master);
    header(b, "fencegate_redis_failovers_total", "counter",
           "Times a new Redis connection found another master than the one before "
           "(a Sentinel failover seen by this gateway).");
    put(b, "fencegate_redis_failovers_total %lld\n", atomic_load(&m->redis_failovers));
    if (topo->nnodes == 0) {
        return;
    }
    header(b, "fencegate_redlock_node_counts", "gauge",
           "Redlock: 1 when the master counts towards a majority (reachable and not held "
           "out), else 0.");
    for (int i = 0; i < topo->nnodes; i++) {
        put(b, "fencegate_redlock_node_counts{addr=\"%s\"} %d\n", topo->nodes[i].addr,
            topo->nodes[i].counts);
    }
    header(b, "fencegate_redlock_node_held_out_until_seconds", "gauge",
           "Redlock: the Unix time until which a master that lost its data is held out "
           "(delayed restart), 0 when it is not held out.");
    int64_t now_ms = gw__wall_ms();
    for (int i = 0; i < topo->nnodes; i++) {
        int64_t left_ms = topo->nodes[i].held_out_ms;
        put(b, "fencegate_redlock_node_held_out_until_seconds{addr=\"%s\"} %.3f\n",
            topo->nodes[i].addr, left_ms > 0 ? (double)(now_ms + left_ms) / 1e3 : 0.0);
    }
}

/* The store: up, its commits' latency, and tokens its ledger failed to record. */
static void store(textbuf *b, gw_metrics *m)
{
    header(b, "fencegate_store_up", "gauge",
           "1 when the last storage probe (a read transaction, made by /readyz and by every "
           "/metrics scrape) succeeded, 0 when the store was unavailable.");
    put(b, "fencegate_store_up %d\n", atomic_load(&m->store_up));
    const char *name = "fencegate_store_commit_duration_seconds";
    header(b, name, "histogram",
           "Time of one commit of the storage writer: a batch of token-checked writes (and, "
           "on PostgreSQL, ledger grants) in one transaction.");
    histogram(b, name, "", m->commit_bucket, &m->commit_sum_us);
    header(b, "fencegate_ledger_uncovered_total", "counter",
           "Tokens Redis minted that the token ledger could not record durably (a store "
           "error): each was given back and its /lock answered 503. Above zero, the ledger "
           "lags behind Redis and locks are refused.");
    put(b, "fencegate_ledger_uncovered_total %llu\n", atomic_load(&m->ledger_uncovered));
}

/* Connections now and the limits they run into. */
static void limits(textbuf *b, gw_metrics *m)
{
    header(b, "fencegate_connections", "gauge", "HTTP connections open now.");
    long long open = atomic_load(&m->connections);
    put(b, "fencegate_connections %lld\n", open > 0 ? open : 0);
    header(b, "fencegate_max_connections", "gauge",
           "--max-connections in force (after start-up fitted it to the open-file limit).");
    put(b, "fencegate_max_connections %d\n", m->max_connections);
    header(b, "fencegate_max_waiters", "gauge",
           "--max-waiters in force: parked /lock waiters at once; more answer 503.");
    put(b, "fencegate_max_waiters %d\n", m->max_waiters);
}

char *gw__metrics_render(gw_metrics *m, const lk_topology *topo, size_t *len)
{
    textbuf b = {malloc(8192), 0, 8192, 0};
    if (b.data == NULL) {
        return NULL;
    }
    outcomes(&b, "fencegate_acquire_total", "POST /lock calls by outcome.", acquire_names,
             m->acquire, GW_ACQ_COUNT);
    outcomes(&b, "fencegate_release_total", "POST /unlock calls by outcome.", release_names,
             m->release, GW_REL_COUNT);
    outcomes(&b, "fencegate_renew_total", "POST /renew calls by outcome.", renew_names, m->renew,
             GW_REN_COUNT);
    static const char *const admin_names[2] = {"released", "not_held"};
    outcomes(&b, "fencegate_admin_release_total",
             "POST /admin/release calls that answered 200, by outcome (forced releases).",
             admin_names, m->admin_release, 2);
    static const char *const session_names[2] = {"deleted", "expired"};
    outcomes(&b, "fencegate_sessions_ended_total",
             "Sessions whose locks were all released and fenced, by how they ended (expired: "
             "ended by this gateway's reaper).",
             session_names, m->sessions_ended, 2);
    outcomes(&b, "fencegate_write_total", "PUT /resources calls by outcome.", write_names,
             m->write, GW_WR_COUNT);
    header(&b, "fencegate_locks_held", "gauge",
           "Locks first acquired through this gateway minus locks released to zero through it. "
           "Leases that expire and locks taken through other gateways are not seen.");
    long long held = atomic_load(&m->locks_held);
    put(&b, "fencegate_locks_held %lld\n", held > 0 ? held : 0);
    header(&b, "fencegate_redis_up", "gauge",
           "1 when the last Redis call or probe succeeded, 0 when Redis was unreachable.");
    put(&b, "fencegate_redis_up %d\n", atomic_load(&m->redis_up));
    header(&b, "fencegate_redis_fast_fails_total", "counter",
           "Redis calls answered 503 without being sent, because Redis stalled past the "
           "command timeout moments before (the stall breaker).");
    put(&b, "fencegate_redis_fast_fails_total %lld\n", lk_breaker_fast_fails(m->breaker));
    header(&b, "fencegate_waiters", "gauge",
           "POST /lock requests parked here, waiting for a release (they hold no thread).");
    long long parked = atomic_load(&m->waiters_parked);
    put(&b, "fencegate_waiters %lld\n", parked > 0 ? parked : 0);
    labelled(&b, "fencegate_waiter_wakes_total",
             "Parked waiters woken, by reason: a release message, the holder's lease running "
             "out, the waiter's own deadline, its client hanging up, or shutdown.",
             "reason", wake_names, m->waiter_wakes, GW_WAKE_COUNT);
    header(&b, "fencegate_waiters_parked_unasked_total", "counter",
           "Waiting POST /lock requests parked without a Redis call: this gateway had just "
           "granted the lock to another owner, and no release or expiry was seen since.");
    put(&b, "fencegate_waiters_parked_unasked_total %llu\n", atomic_load(&m->parked_unasked));
    header(&b, "fencegate_lock_handoffs_total", "counter",
           "Parked waiters whose attempt was sent right behind an /unlock's release, in the "
           "same Redis pipeline (counted in the release wakes as well).");
    put(&b, "fencegate_lock_handoffs_total %llu\n", atomic_load(&m->handoffs));
    header(&b, "fencegate_redis_subscriber_up", "gauge",
           "1 while the release subscriber connection to Redis is up.");
    put(&b, "fencegate_redis_subscriber_up %d\n", atomic_load(&m->subscriber_up));
    header(&b, "fencegate_redis_subscriptions", "gauge",
           "Resources with waiters here whose release channel Redis has confirmed "
           "subscribed (on Redlock, its first master): their releases wake waiters from now "
           "on.");
    put(&b, "fencegate_redis_subscriptions %lld\n", atomic_load(&m->subscriptions));
    topology(&b, m, topo);
    header(&b, "fencegate_request_deadline_closed_total", "counter",
           "Connections closed because their request was not received in full within its "
           "deadline (a slow or trickling client).");
    put(&b, "fencegate_request_deadline_closed_total %llu\n",
        atomic_load(&m->deadline_closed));
    header(&b, "fencegate_log_lines_dropped_total", "counter",
           "Log lines dropped because stderr did not keep up and the log buffer was full "
           "(a request never waits for its log line).");
    put(&b, "fencegate_log_lines_dropped_total %llu\n", gw__log_dropped());
    int clients = atomic_load(&m->client_count);
    if (clients > 0) {
        static const char *const classes[GW_METRIC_CLIENT_CLASSES] = {"2xx", "4xx", "5xx"};
        header(&b, "fencegate_client_requests_total", "counter",
               "Requests by client (--clients names, \"other\" past 64) and status class.");
        for (int i = 0; i <= clients; i++) {
            const char *name = i < clients ? m->client_names[i] : "other";
            if (i == clients && i < GW_METRIC_CLIENTS) {
                break; /* no "other" while every name has a slot */
            }
            for (int c = 0; c < GW_METRIC_CLIENT_CLASSES; c++) {
                put(&b, "fencegate_client_requests_total{client=\"%s\",code=\"%s\"} %llu\n",
                    name, classes[c], atomic_load(&m->client_requests[i][c]));
            }
        }
    }
    static const char *const pipelines[4] = {"redis", "storage", "side", "reads"};
    header(&b, "fencegate_pipeline_batches_total", "counter",
           "Batches sent by the pipelines: Redis script calls sent as one pipeline, "
           "token-checked writes checked in one transaction (one fsync when any is "
           "accepted), calls that may block run off the server threads (side: probes and "
           "lock status reads; reads: value reads).");
    for (int i = 0; i < 4; i++) {
        put(&b, "fencegate_pipeline_batches_total{pipeline=\"%s\"} %llu\n", pipelines[i],
            atomic_load(&m->pipe_batches[i]));
    }
    header(&b, "fencegate_pipeline_jobs_total", "counter",
           "Calls and writes carried by those batches (jobs / batches is the mean batch).");
    for (int i = 0; i < 4; i++) {
        put(&b, "fencegate_pipeline_jobs_total{pipeline=\"%s\"} %llu\n", pipelines[i],
            atomic_load(&m->pipe_jobs[i]));
    }
    header(&b, "fencegate_token_floor_corrections_total", "counter",
           "Acquisitions that lifted the resource's Redis token counter to the floor the "
           "gateway passes (the durable ledger floor, the largest token this process handed "
           "out, the resource's highest stored token). Normal for a resource's first "
           "acquisition, the first ones after a gateway restart, and resources that fell "
           "behind others' tokens; it also counts lifts after Redis lost data, but is not by "
           "itself a sign of that.");
    put(&b, "fencegate_token_floor_corrections_total %llu\n", atomic_load(&m->floor_corrections));
    header(&b, "fencegate_http_responses_total", "counter", "HTTP responses by status code.");
    for (int i = 0; i < GW_STATUS_COUNT; i++) {
        if (i < GW_STATUS_COUNT - 1) {
            put(&b, "fencegate_http_responses_total{code=\"%d\"} %llu\n", status_codes[i],
                atomic_load(&m->responses[i]));
        } else {
            put(&b, "fencegate_http_responses_total{code=\"other\"} %llu\n",
                atomic_load(&m->responses[i]));
        }
    }
    latency(&b, m);
    store(&b, m);
    limits(&b, m);
    header(&b, "fencegate_build_info", "gauge", "Always 1; the version is a label.");
    put(&b, "fencegate_build_info{version=\"%s\"} 1\n", FENCEGATE_VERSION);
    if (b.failed) {
        free(b.data);
        return NULL;
    }
    *len = b.len;
    return b.data;
}
