/*
 * A Redis Sentinel set for tests: one master, R replicas and M sentinels, each a child
 * process on a free loopback port in its own temp dir, stopped by PID.
 *
 * Why start() waits as long as it does: a sentinel fails over only to a replica it has
 * already discovered (through the master's INFO), and it needs the other sentinels (found
 * through the master's __sentinel__:hello channel, every 2 s) to reach the quorum and to
 * elect a leader. A master killed before that is never replaced. So start() returns only when
 * every sentinel reports (1) the master at the address we started it on, not down, (2) every
 * running replica, linked (master-link-status ok) and not down, and (3) M - 1 other sentinels.
 * The same condition, with the current master, is the end of restart_replica().
 *
 * A failover is over for a test when every running sentinel names the same new master and
 * that node answers ROLE as master: from then on a client that asks any sentinel reaches a
 * node that takes writes.
 *
 * Each sentinel gets SENTINEL DEBUG settings (Redis 7.0) fit for a busy test machine, where a
 * dozen servers share two cores and fsync under appendfsync always:
 *   - TILT: a sentinel whose timer runs over 2 s late (its own CONFIG REWRITE fsync, behind
 *     other processes' fsyncs, is enough) stops acting for 30 s: no failover, no replica
 *     moved to the new master. Twice in one test is over a minute of doing nothing, which is
 *     what clean-clone runs showed (a replica not moved within 90 s). Here a sentinel tilts
 *     only after a 30 s stall, and for 1 s.
 *   - INFO of the replicas every 1 s instead of 10 s outside a failover, so that readiness
 *     (the replicas linked to the new master) is seen when it happens.
 * What a sentinel decides, and when a client follows it, is unchanged; only how long it sits
 * out a stall and how soon it looks again.
 */
#include "harness.h"
#include "harness_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A master that has not answered PING for 3 s is down. 1 s made a busy machine (a dozen
 * servers fsyncing under appendfsync always on two cores) take a stalled master for a dead
 * one and fail over again, or back and forth, while a test waited for the set to settle. */
#define SENTINEL_DOWN_AFTER_MS 3000
#define SENTINEL_FAILOVER_TIMEOUT_MS 5000
#define SENTINEL_START_TIMEOUT_MS 30000

/* Writes the sentinel's config file: sentinel refuses to start without a writable one. */
static void write_sentinel_conf(const th_sentinel *s, const th_redis *node, int master_port)
{
    char path[300];
    FILE *f = NULL;

    snprintf(path, sizeof path, "%s/sentinel.conf", node->dir);
    f = fopen(path, "w");
    if (f == NULL) {
        perror("harness: sentinel.conf");
        exit(1);
    }
    fprintf(f, "sentinel monitor %s 127.0.0.1 %d %d\n", s->master_name, master_port, s->quorum);
    fprintf(f, "sentinel down-after-milliseconds %s %d\n", s->master_name,
            SENTINEL_DOWN_AFTER_MS);
    fprintf(f, "sentinel failover-timeout %s %d\n", s->master_name,
            SENTINEL_FAILOVER_TIMEOUT_MS);
    fprintf(f, "sentinel parallel-syncs %s 1\n", s->master_name);
    if (s->password[0] != '\0') {
        /* The data nodes' password, and the one sentinels use with each other (they run
         * with the same requirepass). */
        fprintf(f, "sentinel auth-pass %s %s\n", s->master_name, s->password);
        fprintf(f, "sentinel sentinel-pass %s\n", s->password);
    }
    fclose(f);
}

/* Port of the master that sentinel q names, or -1. */
static int sentinel_master_port(const th_sentinel *s, const th_redis *q)
{
    redisReply *reply = th__node_command(q, "SENTINEL get-master-addr-by-name %s",
                                         s->master_name);
    int port = -1;

    if (reply != NULL && reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
        reply->element[1]->type == REDIS_REPLY_STRING) {
        port = atoi(reply->element[1]->str);
    }
    freeReplyObject(reply);
    return port;
}

/* The SENTINEL DEBUG settings of the file head; exits loudly when refused. */
static void tune_sentinel(const th_redis *q)
{
    redisReply *reply = th__node_command(q, "SENTINEL DEBUG tilt-trigger 30000 tilt-period 1000 "
                                            "info-period 1000");
    int ok = reply != NULL && reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "OK") == 0;
    freeReplyObject(reply);
    if (!ok) {
        fprintf(stderr, "harness: sentinel %d refused SENTINEL DEBUG (needs Redis 7.0)\n",
                q->port);
        exit(1);
    }
}

static int index_of_port(const th_sentinel *s, int port)
{
    for (int i = 0; i < s->nredis; i++) {
        if (s->redis[i].port == port) {
            return i;
        }
    }
    return -1;
}

static int running_sentinels(const th_sentinel *s)
{
    int n = 0;
    for (int i = 0; i < s->nsentinels; i++) {
        n += s->sentinels[i].pid > 0;
    }
    return n;
}

/* Flags of a sentinel entry mean healthy when none of these appear. */
static int flags_healthy(const char *flags)
{
    return strstr(flags, "s_down") == NULL && strstr(flags, "o_down") == NULL &&
           strstr(flags, "disconnected") == NULL;
}

/* 1 when sentinel q lists every running data node other than the master as a healthy, linked
 * replica. */
static int sentinel_knows_replicas(const th_sentinel *s, const th_redis *q, int master)
{
    redisReply *reply = th__node_command(q, "SENTINEL replicas %s", s->master_name);
    int ok = reply != NULL && reply->type == REDIS_REPLY_ARRAY;

    for (int i = 0; ok && i < s->nredis; i++) {
        int found = 0;
        if (i == master || s->redis[i].pid <= 0) {
            continue;
        }
        for (size_t e = 0; e < reply->elements && !found; e++) {
            const redisReply *r = reply->element[e];
            found = th__map_int(r, "port") == s->redis[i].port &&
                    flags_healthy(th__map_str(r, "flags")) &&
                    strcmp(th__map_str(r, "master-link-status"), "ok") == 0 &&
                    th__map_int(r, "master-port") == s->redis[master].port;
        }
        ok = found;
    }
    freeReplyObject(reply);
    return ok;
}

/* The start() condition (file head) for master index `master`. */
static int sentinels_ready(const th_sentinel *s, int master)
{
    int others = running_sentinels(s) - 1;

    for (int i = 0; i < s->nsentinels; i++) {
        const th_redis *q = &s->sentinels[i];
        redisReply *m = NULL;
        int ok = 0;

        if (q->pid <= 0) {
            continue;
        }
        if (sentinel_master_port(s, q) != s->redis[master].port) {
            return 0;
        }
        m = th__node_command(q, "SENTINEL master %s", s->master_name);
        ok = th__map_int(m, "num-other-sentinels") == others &&
             flags_healthy(th__map_str(m, "flags"));
        freeReplyObject(m);
        if (!ok || !sentinel_knows_replicas(s, q, master)) {
            return 0;
        }
    }
    return 1;
}

static int wait_ready(const th_sentinel *s, int master, int timeout_ms)
{
    int64_t deadline = th_now_ms() + timeout_ms;
    while (!sentinels_ready(s, master)) {
        if (th_now_ms() > deadline) {
            return -1;
        }
        th_nap_ms(50);
    }
    return 0;
}

static void replica_args(th_redis *r, int master_port)
{
    char port[16];

    snprintf(port, sizeof port, "%d", master_port);
    r->nargs = 0;
    th__node_arg(r, "--replicaof");
    th__node_arg(r, "127.0.0.1");
    th__node_arg(r, port);
}

/* What every data node gets besides replica_args(). */
static void common_args(const th_sentinel *s, th_redis *r)
{
    /* A full sync starts at once: by default the master waits 5 s for more replicas to
     * share one diskless transfer, which is all of a set-up's or a rejoin's time here and
     * changes nothing a lock test measures (the single Redis has no replicas). */
    th__node_arg(r, "--repl-diskless-sync-delay");
    th__node_arg(r, "0");
    if (s->password[0] != '\0') {
        th__node_arg(r, "--masterauth");
        th__node_arg(r, s->password);
    }
}

void th_sentinel_start(th_sentinel *s, const char *master_name, int replicas, int sentinels,
                       const char *password)
{
    memset(s, 0, sizeof *s);
    if (replicas < 0 || replicas + 1 > TH_MAX_NODES || sentinels < 1 ||
        sentinels > TH_MAX_NODES) {
        fprintf(stderr, "harness: a sentinel set has 0 to %d replicas and 1 to %d sentinels\n",
                TH_MAX_NODES - 1, TH_MAX_NODES);
        exit(1);
    }
    snprintf(s->master_name, sizeof s->master_name, "%s", master_name);
    if (password != NULL) {
        snprintf(s->password, sizeof s->password, "%s", password);
    }
    s->nredis = 1 + replicas;
    s->nsentinels = sentinels;
    s->quorum = sentinels / 2 + 1;

    /* Every data node is started as th_redis_start(r, 1, password) would be (AOF,
     * appendfsync always), plus masterauth: after a failover the old master is a replica. */
    for (int i = 0; i < s->nredis; i++) {
        th_redis *r = &s->redis[i];
        th__node_init(r, "sentinel-redis", 1, password);
        if (i > 0) {
            replica_args(r, s->redis[0].port);
        }
        common_args(s, r);
        th__node_spawn(r, 0);
    }
    for (int i = 0; i < s->nsentinels; i++) {
        th_redis *q = &s->sentinels[i];
        th__node_init(q, "sentinel", 0, password);
        q->sentinel = 1;
        write_sentinel_conf(s, q, s->redis[0].port);
        th__node_spawn(q, 0);
        tune_sentinel(q);
    }

    th__append(s->url, sizeof s->url, "redis-sentinel://");
    if (s->password[0] != '\0') {
        th__append(s->url, sizeof s->url, ":%s@", s->password);
    }
    for (int i = 0; i < s->nsentinels; i++) {
        th__append(s->url, sizeof s->url, "%s127.0.0.1:%d", i > 0 ? "," : "",
                   s->sentinels[i].port);
    }
    th__append(s->url, sizeof s->url, "/%s", s->master_name);

    if (wait_ready(s, 0, SENTINEL_START_TIMEOUT_MS) != 0) {
        fprintf(stderr,
                "harness: the sentinels did not all see master %d, its %d replicas and each "
                "other within %d ms; logs in %s and %s\n",
                s->redis[0].port, replicas, SENTINEL_START_TIMEOUT_MS, s->sentinels[0].dir,
                s->redis[0].dir);
        th_sentinel_stop(s);
        exit(1);
    }
}

int th_sentinel_master(const th_sentinel *s)
{
    int port = -1;

    for (int i = 0; i < s->nsentinels; i++) {
        int p = 0;
        if (s->sentinels[i].pid <= 0) {
            continue;
        }
        p = sentinel_master_port(s, &s->sentinels[i]);
        if (p < 0 || (port >= 0 && p != port)) {
            return -1;
        }
        port = p;
    }
    return port < 0 ? -1 : index_of_port(s, port);
}

int th_sentinel_kill_master(th_sentinel *s)
{
    int m = th_sentinel_master(s);
    if (m >= 0) {
        th_redis_kill(&s->redis[m]);
    }
    return m;
}

int th_sentinel_wait_failover(th_sentinel *s, int old_master, int timeout_ms)
{
    int64_t deadline = th_now_ms() + timeout_ms;

    for (;;) {
        int m = th_sentinel_master(s);
        if (m >= 0 && m != old_master && th__role_is(&s->redis[m], "master")) {
            return m;
        }
        if (th_now_ms() > deadline) {
            return -1;
        }
        th_nap_ms(50);
    }
}

int th_sentinel_wait_ready(th_sentinel *s, int timeout_ms)
{
    int m = th_sentinel_master(s);
    return m < 0 ? -1 : wait_ready(s, m, timeout_ms);
}

int th_sentinel_restart_replica(th_sentinel *s, int i, int timeout_ms)
{
    int m = th_sentinel_master(s);
    th_redis *r = &s->redis[i];

    if (m < 0 || m == i || r->pid > 0) {
        return -1;
    }
    /* Started as a replica of the current master at once, rather than as the master it may
     * have been, so that no client ever finds two masters. */
    replica_args(r, s->redis[m].port);
    common_args(s, r);
    th_redis_restart(r);
    return wait_ready(s, m, timeout_ms);
}

void th_sentinel_stop(th_sentinel *s)
{
    /* Sentinels first, so that none starts a failover while the data nodes go. */
    for (int i = 0; i < s->nsentinels; i++) {
        th_redis_stop(&s->sentinels[i]);
    }
    for (int i = 0; i < s->nredis; i++) {
        th_redis_stop(&s->redis[i]);
    }
    s->nsentinels = 0;
    s->nredis = 0;
}
