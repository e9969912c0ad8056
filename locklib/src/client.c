/*
 * The handle: its URL and options, opening and closing it, its error text and owner ids.
 * Talking to Redis is the transport's (transport.c); the calls are locks.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "watchdog_internal.h"

lk_status lk__fail(lk_client *c, lk_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    lk__verrf(c != NULL ? c->err : NULL, st, fmt, ap);
    va_end(ap);
    return st;
}

/* Parses "host[:port]" (len bytes at p) into seed, with default_port when none. Returns 0
 * or -1. */
static int parse_hostport(lk__seed *seed, const char *p, size_t len, int default_port)
{
    char hostport[300];

    if (len == 0 || len >= sizeof hostport) {
        return -1;
    }
    memcpy(hostport, p, len);
    hostport[len] = '\0';
    seed->port = default_port;
    char *colon = strrchr(hostport, ':');
    if (colon != NULL) {
        char *end = NULL;
        long port = strtol(colon + 1, &end, 10);
        if (*end != '\0' || port < 1 || port > 65535) {
            return -1;
        }
        seed->port = (int)port;
        *colon = '\0';
    }
    size_t hostlen = strlen(hostport);
    if (hostlen == 0 || hostlen >= sizeof seed->host) {
        return -1;
    }
    memcpy(seed->host, hostport, hostlen + 1);
    return 0;
}

/* Parses the [[user]:password@] of a URL whose scheme ends before p into c. Returns where
 * the hosts start, or NULL for a malformed login. */
static const char *parse_login(lk__node *c, const char *p)
{
    const char *at = strrchr(p, '@');

    if (at == NULL) {
        return p;
    }
    const char *colon = memchr(p, ':', (size_t)(at - p));
    if (colon == NULL || (size_t)(colon - p) >= sizeof c->user ||
        (size_t)(at - colon - 1) >= sizeof c->password) {
        return NULL;
    }
    memcpy(c->user, p, (size_t)(colon - p));
    memcpy(c->password, colon + 1, (size_t)(at - colon - 1));
    return at + 1;
}

/* Parses redis-sentinel://[[user]:password@]host[:port][,host[:port]...]/NAME[/db] into
 * the login c and the sentinels s. Returns 0 or -1. */
static int parse_sentinel_url(lk__node *c, lk__sentinels *s, const char *url)
{
    const char *p = parse_login(c, url + strlen("redis-sentinel://"));
    const char *slash = p != NULL ? strchr(p, '/') : NULL;

    if (slash == NULL) {
        return -1;
    }
    while (p < slash) {
        const char *comma = memchr(p, ',', (size_t)(slash - p));
        const char *end = comma != NULL ? comma : slash;
        if (s->n == LK__SEEDS_MAX || parse_hostport(&s->seeds[s->n], p, (size_t)(end - p),
                                                    26379) != 0) {
            return -1;
        }
        s->n++;
        p = end + (comma != NULL);
    }
    const char *name = slash + 1;
    const char *dbslash = strchr(name, '/');
    size_t namelen = dbslash != NULL ? (size_t)(dbslash - name) : strlen(name);
    if (s->n == 0 || namelen == 0 || namelen >= sizeof s->master_name) {
        return -1;
    }
    memcpy(s->master_name, name, namelen);
    if (dbslash != NULL && dbslash[1] != '\0') {
        char *end = NULL;
        long db = strtol(dbslash + 1, &end, 10);
        if (*end != '\0' || db < 0 || db > 1000000) {
            return -1;
        }
        c->db = (int)db;
    }
    /* Until the sentinels are asked, the node is the first sentinel: never connected to. */
    snprintf(c->host, sizeof c->host, "%s", s->seeds[0].host);
    c->port = s->seeds[0].port;
    return 0;
}

/* Parses SCHEME[[user]:password@]host[:port][,host[:port]...] (redis-cluster://: the seed
 * nodes; redlock://: the masters), scheme_len bytes of scheme, into the login c and the
 * nodes s. Returns 0 or -1. */
static int parse_node_list_url(lk__node *c, lk__sentinels *s, const char *url, size_t scheme_len)
{
    const char *p = parse_login(c, url + scheme_len);
    if (p == NULL || *p == '\0' || strchr(p, '/') != NULL) {
        return -1;
    }
    const char *end = p + strlen(p);
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma != NULL ? comma : end;
        if (s->n == LK__SEEDS_MAX ||
            parse_hostport(&s->seeds[s->n], p, (size_t)(stop - p), 6379) != 0) {
            return -1;
        }
        s->n++;
        p = stop + (comma != NULL);
        if (comma != NULL && p == end) {
            return -1; /* a trailing comma */
        }
    }
    return s->n > 0 ? 0 : -1;
}

/* Parses redis://[[user]:password@]host[:port][/db] or unix:///path into c. */
static int parse_url(lk__node *c, const char *url)
{
    const char *p = NULL;
    const char *at = NULL;
    const char *hostend = NULL;

    c->port = 6379;
    if (strncmp(url, "unix://", 7) == 0) {
        p = url + 7;
        if (p[0] != '/' || strlen(p) >= sizeof c->unix_path) {
            return -1;
        }
        snprintf(c->unix_path, sizeof c->unix_path, "%s", p);
        return 0;
    }
    if (strncmp(url, "redis://", 8) != 0) {
        return -1;
    }
    p = url + 8;
    at = strrchr(p, '@');
    if (at != NULL) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (colon == NULL || (size_t)(colon - p) >= sizeof c->user ||
            (size_t)(at - colon - 1) >= sizeof c->password) {
            return -1;
        }
        memcpy(c->user, p, (size_t)(colon - p));
        memcpy(c->password, colon + 1, (size_t)(at - colon - 1));
        p = at + 1;
    }
    hostend = strchr(p, '/');
    if (hostend == NULL) {
        hostend = p + strlen(p);
    } else {
        char *end = NULL;
        long db = strtol(hostend + 1, &end, 10);
        if (hostend[1] != '\0' && (*end != '\0' || db < 0 || db > 1000000)) {
            return -1;
        }
        c->db = (int)db;
    }
    lk__seed seed;
    if (parse_hostport(&seed, p, (size_t)(hostend - p), 6379) != 0) {
        return -1;
    }
    _Static_assert(sizeof seed.host == sizeof c->host, "a seed's host fits a node's");
    memcpy(c->host, seed.host, sizeof c->host);
    c->port = seed.port;
    return 0;
}

void lk_options_init(lk_options *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->connect_timeout_ms = 2000;
    opts->command_timeout_ms = 2000;
    opts->watchdog_lease_ms = 30000;
    opts->idempotency_ttl_ms = 600000;
    opts->replica_timeout_ms = 1000;
}

static int options_valid(const lk_options *o)
{
    /* With replicas to wait for, WAIT must answer before the command timeout: WAIT 0 blocks
     * forever, and a later answer would leave the connection unusable for the rollback. */
    int replicas_ok = o->min_replicas == 0 ||
                      (o->replica_timeout_ms > 0 && o->replica_timeout_ms < o->command_timeout_ms);
    return o->connect_timeout_ms > 0 && o->command_timeout_ms > 0 &&
           lk__valid_lease(o->watchdog_lease_ms) && o->idempotency_ttl_ms >= 1000 &&
           o->token_key_idle_ttl_ms >= 0 && o->token_key_idle_ttl_ms < LK_TOKEN_MAX &&
           o->min_replicas >= 0 && o->replica_timeout_ms >= 0 && replicas_ok &&
           o->redlock_max_lease_ms >= 0;
}

lk_status lk__client_new(lk_client **out, const char *url, const lk_options *opts)
{
    lk_client *c = NULL;
    lk__node node;
    lk__sentinels sentinels;
    int sentinel = url != NULL && strncmp(url, "redis-sentinel://", 17) == 0;
    int cluster = url != NULL && strncmp(url, "redis-cluster://", 16) == 0;
    int redlock = url != NULL && strncmp(url, "redlock://", 10) == 0;
    int bad = 0;

    *out = NULL;
    if (url == NULL || (opts != NULL && !options_valid(opts))) {
        return LK_EINVAL;
    }
    c = calloc(1, sizeof *c);
    if (c == NULL) {
        return LK_ENOMEM;
    }
    if (opts != NULL) {
        c->opts = *opts;
    } else {
        lk_options_init(&c->opts);
    }
    memset(&node, 0, sizeof node);
    memset(&sentinels, 0, sizeof sentinels);
    if (cluster || redlock) {
        bad = parse_node_list_url(&node, &sentinels, url, cluster ? 16 : 10);
        /* Redlock needs an odd number of masters: 3, 5, ... up to LK_REDLOCK_NODES_MAX. */
        bad = bad || (redlock && !lk__rl_valid_n(sentinels.n));
        /* Redlock's masters have no replicas to WAIT for (the majority is its redundancy):
         * min_replicas would refuse every acquisition, so it is refused here, at open. */
        bad = bad || (redlock && c->opts.min_replicas > 0);
    } else if (sentinel) {
        bad = parse_sentinel_url(&node, &sentinels, url);
    } else {
        bad = parse_url(&node, url);
    }
    if (bad != 0) {
        memset(node.password, 0, sizeof node.password);
        free(c);
        return LK_EINVAL;
    }
    node.connect_timeout_ms = c->opts.connect_timeout_ms;
    node.command_timeout_ms = c->opts.command_timeout_ms;
    if (cluster || redlock) {
        lk_status st = cluster ? lk__cluster_init(&c->tp, &node, sentinels.seeds, sentinels.n,
                                                  c->opts.breaker, c->err)
                               : lk__redlock_init(&c->tp, &node, sentinels.seeds, sentinels.n,
                                                  c->opts.watchdog_lease_ms,
                                                  c->opts.redlock_max_lease_ms, c->err);
        if (st != LK_OK) {
            memset(node.password, 0, sizeof node.password);
            free(c);
            return st;
        }
    } else {
        lk__transport_init(&c->tp, &node, sentinel ? &sentinels : NULL, c->opts.breaker,
                           c->err);
    }
    /* The password is a capability: the transport keeps the only copy. */
    memset(node.password, 0, sizeof node.password);
    lk_random_id(c->id);
    *out = c;
    return LK_OK;
}

lk_status lk_client_open(lk_client **out, const char *url, const lk_options *opts)
{
    lk_status st = lk__client_new(out, url, opts);
    if (st != LK_OK) {
        return st;
    }
    return lk__transport_connect(&(*out)->tp);
}

void lk_client_close(lk_client *c)
{
    if (c == NULL) {
        return;
    }
    lk__watchdog_stop(c);
    lk__transport_free(&c->tp);
    if (c->sub != NULL) {
        redisFree(c->sub);
    }
    /* The id is a capability: do not leave it in freed memory. */
    memset(c->id, 0, sizeof c->id);
    free(c);
}

const char *lk_errstr(const lk_client *c)
{
    return c != NULL ? c->err : "no client";
}

char *lk_owner_id(const lk_client *c, char *buf)
{
    static _Atomic unsigned long next_thread_no = 1;
    static _Thread_local unsigned long thread_no = 0;

    if (thread_no == 0) {
        thread_no = next_thread_no++;
    }
    snprintf(buf, LK_OWNER_ID_LEN + 1, "%s:%lu", c->id, thread_no);
    return buf;
}

lk_status lk_ping(lk_client *c)
{
    return lk__transport_ping(&c->tp);
}

void lk_client_topology(const lk_client *c, lk_topology *out)
{
    memset(out, 0, sizeof *out);
    out->kind = c->tp.kind;
    memcpy(out->master, c->tp.master, sizeof out->master);
    out->failovers = c->tp.failovers;
    if (lk__redlock_is(&c->tp)) {
        lk__redlock_nodes(&c->tp, out);
    }
}

const char *lk_topology_name(lk_topology_kind kind)
{
    switch (kind) {
    case LK_TOPOLOGY_SINGLE:
        return "single";
    case LK_TOPOLOGY_SENTINEL:
        return "sentinel";
    case LK_TOPOLOGY_CLUSTER:
        return "cluster";
    case LK_TOPOLOGY_REDLOCK:
        return "redlock";
    }
    return "unknown";
}
