/*
 * lk_list_locks(): the held locks, in name order, a page at a time.
 *
 * Redis keeps no index of the locks by name, and KEYS would hold a server for the whole
 * keyspace, so a page is one pass of SCAN over every node that holds locks, each step
 * bounded by COUNT (LK__SCAN_COUNT) and filtered server-side by MATCH fg:{PREFIX*}:lock,
 * on a connection of its own (the handle's connection keeps its pipeline for the calls).
 * Of the names seen, those after `after` are kept in a sorted array of at most max + 1 (so
 * memory is bounded by the page, not by the keyspace); then one pipelined status read per
 * name kept (the STATUS call, which on Redlock counts a lock only when a majority holds it)
 * drops the names that are no longer, or not really, held. The cost is therefore a pass
 * over the whole keyspace per page: O(keys / LK__SCAN_COUNT) round trips.
 */
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "conn_internal.h"
#include "run_internal.h"

#define LK__SCAN_COUNT "2000" /* keys one SCAN step looks at, at most about a millisecond */
#define LK__LIST_NODES 32

typedef struct kept {
    char (*name)[LK_RESOURCE_MAX + 1];
    size_t n, cap;
    int dropped;        /* a name after the last kept one was seen and not kept */
    const char *after;
    size_t prefix_len;
    const char *prefix;
} kept;

/* Offers one resource name seen on a node. */
static void offer(kept *k, const char *name, size_t len)
{
    char buf[LK_RESOURCE_MAX + 1];

    if (len == 0 || len > LK_RESOURCE_MAX) {
        return;
    }
    memcpy(buf, name, len);
    buf[len] = '\0';
    if (!lk_valid_resource(buf) || strncmp(buf, k->prefix, k->prefix_len) != 0 ||
        (k->after[0] != '\0' && strcmp(buf, k->after) <= 0)) {
        return;
    }
    size_t lo = 0, hi = k->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(k->name[mid], buf);
        if (c == 0) {
            return; /* seen on another node (Redlock, a slot in migration) */
        }
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (lo == k->cap) {
        k->dropped = 1;
        return;
    }
    if (k->n == k->cap) {
        k->n--;
        k->dropped = 1;
    }
    memmove(k->name[lo + 1], k->name[lo], (k->n - lo) * sizeof k->name[0]);
    memcpy(k->name[lo], buf, len + 1);
    k->n++;
}

/* One node: SCAN it whole, offering every lock name. */
static lk_status scan_node(redisContext *ctx, const char *pattern, kept *k, char *err)
{
    char cursor[32] = "0";

    do {
        const char *argv[] = {"SCAN", cursor, "MATCH", pattern, "COUNT", LK__SCAN_COUNT};
        redisReply *r = lk__command_argv(ctx, 6, argv, NULL);
        if (r == NULL) {
            return lk__errf(err, LK_EUNAVAILABLE, "SCAN failed: %s",
                            ctx->errstr[0] ? ctx->errstr : "no reply");
        }
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_STRING ||
            r->element[1]->type != REDIS_REPLY_ARRAY || r->element[0]->len >= sizeof cursor) {
            lk_status st = lk__errf(err, r->type == REDIS_REPLY_ERROR ? LK_EUNAVAILABLE
                                                                      : LK_EREDIS,
                                    "SCAN answered %s",
                                    r->type == REDIS_REPLY_ERROR ? r->str : "no cursor");
            freeReplyObject(r);
            return st;
        }
        memcpy(cursor, r->element[0]->str, r->element[0]->len);
        cursor[r->element[0]->len] = '\0';
        const redisReply *keys = r->element[1];
        for (size_t i = 0; i < keys->elements; i++) {
            const redisReply *key = keys->element[i];
            /* fg:{R}:lock */
            if (key->type == REDIS_REPLY_STRING && key->len > 9 &&
                memcmp(key->str, "fg:{", 4) == 0 &&
                memcmp(key->str + key->len - 6, "}:lock", 6) == 0) {
                offer(k, key->str + 4, key->len - 10);
            }
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    return LK_OK;
}

/* Scans the nodes that hold locks, each on a connection of its own. Returns OK when enough
 * were scanned for the listing to be whole (every master of a Cluster, a majority of
 * Redlock's), else the failure with the reason in c->err. */
static lk_status scan_all(lk_client *c, const char *pattern, kept *k)
{
    lk__node *nodes = NULL;
    int nn = 0, need = 1, scanned = 0;
    lk_status st = LK_OK;

    if (lk__redlock_is(&c->tp)) {
        nodes = calloc(LK__LIST_NODES, sizeof *nodes);
        if (nodes == NULL) {
            return lk__fail(c, LK_ENOMEM, "out of memory");
        }
        nn = lk__redlock_masters(&c->tp, nodes, LK__LIST_NODES);
        /* A lock held on a majority is on at least one node of any majority. */
        need = lk__rl_quorum(lk__redlock_size(&c->tp));
    } else if (c->tp.ops != NULL) {
        nodes = calloc(LK__LIST_NODES, sizeof *nodes);
        if (nodes == NULL) {
            return lk__fail(c, LK_ENOMEM, "out of memory");
        }
        nn = lk__cluster_masters(&c->tp, nodes, LK__LIST_NODES);
        if (nn <= 0) {
            free(nodes);
            return lk__fail(c, LK_EUNAVAILABLE, "cannot read the cluster's slot map: %s",
                            c->err);
        }
        need = nn; /* every master holds its own slots' locks */
    } else {
        redisContext *ctx = lk__transport_open(&c->tp);
        if (ctx == NULL) {
            return lk__fail(c, LK_EUNAVAILABLE, "%s", c->err);
        }
        st = scan_node(ctx, pattern, k, c->err);
        redisFree(ctx);
        return st;
    }
    for (int i = 0; i < nn; i++) {
        char err[LK__ERR_LEN];
        redisContext *ctx = lk__connect(&nodes[i], err);
        lk_status one = ctx != NULL ? scan_node(ctx, pattern, k, err) : LK_EUNAVAILABLE;
        if (ctx != NULL) {
            redisFree(ctx);
        }
        if (one == LK_OK) {
            scanned++;
        } else {
            st = one;
            snprintf(c->err, LK__ERR_LEN, "%.64s:%d: %.160s", nodes[i].host, nodes[i].port,
                     err);
        }
    }
    /* The login is a capability: do not leave it in freed memory. */
    memset(nodes, 0, LK__LIST_NODES * sizeof *nodes);
    free(nodes);
    if (scanned >= need) {
        return LK_OK;
    }
    return st != LK_OK ? st : lk__fail(c, LK_EUNAVAILABLE, "too few nodes to list");
}

lk_status lk_list_locks(lk_client *c, const char *prefix, const char *after, size_t max,
                        lk_lock_entry *out, size_t *n, char *next)
{
    char pattern[LK_RESOURCE_MAX + 16];
    char after_copy[LK_RESOURCE_MAX + 2]; /* next may be the caller's after buffer */
    kept k = {.prefix = prefix != NULL ? prefix : "", .after = after_copy};

    snprintf(after_copy, sizeof after_copy, "%s", after != NULL ? after : "");
    *n = 0;
    next[0] = '\0';
    k.prefix_len = strlen(k.prefix);
    if (max < 1 || max > LK_LIST_MAX || (k.prefix_len > 0 && !lk_valid_resource(k.prefix)) ||
        (after_copy[0] != '\0' && !lk_valid_resource(after_copy))) {
        return lk__fail(c, LK_EINVAL, "invalid prefix, after or page size");
    }
    /* Resource names hold no glob character ([A-Za-z0-9._:-]): the prefix goes in as is. */
    snprintf(pattern, sizeof pattern, "fg:{%s*}:lock", k.prefix);
    k.cap = max + 1;
    k.name = calloc(k.cap, sizeof k.name[0]);
    lk_call *calls = calloc(k.cap, sizeof *calls);
    lk_call **ptrs = calloc(k.cap, sizeof *ptrs);
    if (k.name == NULL || calls == NULL || ptrs == NULL) {
        free(k.name);
        free(calls);
        free(ptrs);
        return lk__fail(c, LK_ENOMEM, "out of memory");
    }
    lk_status st = scan_all(c, pattern, &k);
    for (size_t i = 0; st == LK_OK && i < k.n; i++) {
        calls[i] = (lk_call){.kind = LK__CALL_STATUS, .resource = k.name[i]};
        ptrs[i] = &calls[i];
    }
    if (st == LK_OK && k.n > 0) {
        lk__run(&c->tp, &c->opts, ptrs, k.n, LK__CALL_STATUS);
    }
    size_t held = 0;
    int cut = 0;
    for (size_t i = 0; st == LK_OK && i < k.n; i++) {
        const lk_call *call = &calls[i];
        if (call->status != LK_OK) {
            st = lk__fail(c, call->status, "%s", call->err);
            break;
        }
        if (!call->recent) {
            continue; /* released or expired since the scan, or held on a minority */
        }
        if (held == max) {
            cut = 1;
            break;
        }
        lk_lock_entry *e = &out[held++];
        memcpy(e->resource, k.name[i], sizeof e->resource);
        e->token = call->res.token;
        e->holds = call->res.holds;
        e->ttl_ms = call->res.ttl_ms;
        e->queued = call->res.queue_pos > 0 ? call->res.queue_pos : 0;
        e->shared = call->res.shared;
        e->holders = call->holders;
    }
    if (st == LK_OK) {
        *n = held;
        /* The next page starts after the last name this one looked at: the last one
         * listed when a held one follows it, else the last one kept from the scan, when
         * names after it were not kept. */
        if (cut) {
            memcpy(next, out[held - 1].resource, sizeof out[0].resource);
        } else if (k.dropped) {
            memcpy(next, k.name[k.n - 1], sizeof k.name[0]);
        }
    }
    free(k.name);
    free(calls);
    free(ptrs);
    return st;
}
