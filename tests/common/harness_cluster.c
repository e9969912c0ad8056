/*
 * A Redis Cluster for tests: N masters with R replicas each, every node a child process on a
 * free loopback port (whose bus port, port + 10000, is free too) in its own temp dir, stopped
 * by PID. redis-cli --cluster create assigns the slots and the replicas, as an operator would.
 *
 * When is a cluster "up" for a test? Every running node must say cluster_state:ok with all
 * 16384 slots assigned and ok, know every node (cluster_known_nodes), count `masters` masters
 * serving slots (cluster_size), exactly `masters` running nodes must answer as masters, and
 * every node that answers as a replica must have its link to the master up. The last part
 * matters for the failover tests: a replica that never synced may not be elected (its data
 * is too old), and the cluster would stay down.
 *
 * A failover is over when every running node is back to cluster_state:ok and sees the slots
 * of the killed master served by another running node, which answers ROLE as master. A node
 * still reporting ok because it has not yet noticed the kill does not pass: its view of the
 * owner is still the killed node.
 *
 * Migration is split in steps (th_cluster_migrate_begin/keys/finish in harness.h) so that a
 * test can hold a slot half moved, which is the only way to meet -ASK on demand.
 *
 * Slot owners are read with CLUSTER SHARDS (Redis 7.0, Debian 12's version); the test checks
 * them against CLUSTER SLOTS.
 */
#include "harness.h"
#include "harness_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Failure detection after 1 s (the sentinel sets wait 3 s: harness_sentinel.c says why). */
#define CLUSTER_NODE_TIMEOUT "1000"
#define CLUSTER_START_TIMEOUT_MS 30000

uint16_t th_crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;

    /* CRC16/XMODEM bit by bit, the reference of the Redis cluster spec (redis/src/crc16.c
     * uses the equivalent table). */
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)buf[i] << 8);
        for (int bit = 0; bit < 8; bit++) {
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
        }
    }
    return crc;
}

int th_key_slot(const char *key, size_t len)
{
    size_t open = 0;
    size_t close = 0;

    for (open = 0; open < len && key[open] != '{'; open++) {
    }
    if (open < len) {
        for (close = open + 1; close < len && key[close] != '}'; close++) {
        }
        /* "{}" is no hash tag: the whole key is hashed. */
        if (close < len && close != open + 1) {
            return th_crc16(key + open + 1, close - open - 1) & (TH_CLUSTER_SLOTS - 1);
        }
    }
    return th_crc16(key, len) & (TH_CLUSTER_SLOTS - 1);
}

int th_cluster_node_by_port(const th_cluster *c, int port)
{
    for (int i = 0; i < c->nnodes; i++) {
        if (c->nodes[i].port == port) {
            return i;
        }
    }
    return -1;
}

/* 1 when slot falls in one of the [start, end] pairs of a CLUSTER SHARDS "slots" array. */
static int shard_has_slot(const redisReply *slots, int slot)
{
    if (slots == NULL || slots->type != REDIS_REPLY_ARRAY) {
        return 0;
    }
    for (size_t i = 0; i + 1 < slots->elements; i += 2) {
        if (slots->element[i]->integer <= slot && slot <= slots->element[i + 1]->integer) {
            return 1;
        }
    }
    return 0;
}

int th_cluster_slot_owner(const th_cluster *c, int from, int slot)
{
    redisReply *reply = th__node_command(&c->nodes[from], "CLUSTER SHARDS");
    int owner = -1;

    if (reply == NULL || reply->type != REDIS_REPLY_ARRAY) {
        goto out;
    }
    for (size_t s = 0; s < reply->elements && owner < 0; s++) {
        const redisReply *shard = reply->element[s];
        const redisReply *nodes = th__map_get(shard, "nodes");
        if (!shard_has_slot(th__map_get(shard, "slots"), slot) || nodes == NULL ||
            nodes->type != REDIS_REPLY_ARRAY) {
            continue;
        }
        for (size_t n = 0; n < nodes->elements; n++) {
            if (strcmp(th__map_str(nodes->element[n], "role"), "master") == 0) {
                owner = th_cluster_node_by_port(c, (int)th__map_int(nodes->element[n], "port"));
                break;
            }
        }
    }
out:
    freeReplyObject(reply);
    return owner;
}

/* 1 when node i's CLUSTER INFO (and, for a replica, its link) says the cluster is whole;
 * *is_master tells whether it answers as a master. */
static int node_sees_whole_cluster(const th_cluster *c, int i, int known_nodes, int *is_master)
{
    char v[64];
    redisReply *info = th__node_command(&c->nodes[i], "CLUSTER INFO");
    redisReply *repl = NULL;
    int ok = info != NULL && info->type == REDIS_REPLY_STRING;

    ok = ok && th__info_field(info->str, "cluster_state", v, sizeof v) == 0 &&
         strcmp(v, "ok") == 0;
    ok = ok && th__info_field(info->str, "cluster_slots_assigned", v, sizeof v) == 0 &&
         atoi(v) == TH_CLUSTER_SLOTS;
    ok = ok && th__info_field(info->str, "cluster_slots_ok", v, sizeof v) == 0 &&
         atoi(v) == TH_CLUSTER_SLOTS;
    ok = ok && th__info_field(info->str, "cluster_known_nodes", v, sizeof v) == 0 &&
         atoi(v) == known_nodes;
    ok = ok && th__info_field(info->str, "cluster_size", v, sizeof v) == 0 &&
         atoi(v) == c->masters;
    freeReplyObject(info);
    if (!ok) {
        return 0;
    }
    repl = th__node_command(&c->nodes[i], "INFO replication");
    ok = repl != NULL && repl->type == REDIS_REPLY_STRING &&
         th__info_field(repl->str, "role", v, sizeof v) == 0;
    *is_master = ok && strcmp(v, "master") == 0;
    if (ok && strcmp(v, "slave") == 0) {
        ok = th__info_field(repl->str, "master_link_status", v, sizeof v) == 0 &&
             strcmp(v, "up") == 0;
    }
    freeReplyObject(repl);
    return ok;
}

/* 1 when every running node sees the whole cluster, and exactly `masters` of them answer as
 * masters: a restarted master believes, from its nodes.conf, that it still serves its slots
 * (and says cluster_state:ok) until the others tell it it was replaced. */
static int cluster_whole(const th_cluster *c)
{
    int masters = 0;

    for (int i = 0; i < c->nnodes; i++) {
        int is_master = 0;
        /* A killed node is still known to the others (flagged fail). */
        if (c->nodes[i].pid > 0 && !node_sees_whole_cluster(c, i, c->nnodes, &is_master)) {
            return 0;
        }
        masters += is_master;
    }
    return masters == c->masters;
}

static int wait_whole(const th_cluster *c, int timeout_ms)
{
    int64_t deadline = th_now_ms() + timeout_ms;

    for (;;) {
        if (cluster_whole(c)) {
            return 0;
        }
        if (th_now_ms() > deadline) {
            return -1;
        }
        th_nap_ms(50);
    }
}

/* Runs redis-cli --cluster create on every node, its output in c->dir/create.log. Exits
 * loudly when redis-cli is missing or fails. */
static void cluster_create(th_cluster *c, int replicas_per_master)
{
    char addrs[TH_MAX_NODES][32];
    char replicas[16];
    char log[300];
    const char *argv[TH_MAX_NODES + 16];
    int n = 0;
    int status = 0;

    argv[n++] = "redis-cli";
    if (c->password[0] != '\0') {
        argv[n++] = "--no-auth-warning";
        argv[n++] = "-a";
        argv[n++] = c->password;
    }
    argv[n++] = "--cluster";
    argv[n++] = "create";
    for (int i = 0; i < c->nnodes; i++) {
        snprintf(addrs[i], sizeof addrs[i], "127.0.0.1:%d", c->nodes[i].port);
        argv[n++] = addrs[i];
    }
    snprintf(replicas, sizeof replicas, "%d", replicas_per_master);
    argv[n++] = "--cluster-replicas";
    argv[n++] = replicas;
    argv[n++] = "--cluster-yes";
    argv[n] = NULL;
    snprintf(log, sizeof log, "%s/create.log", c->dir);

    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "harness: fork: %s\n", strerror(errno));
        exit(1);
    }
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
        }
        execvp("redis-cli", (char *const *)argv);
        fprintf(stderr, "harness: cannot run redis-cli (%s). Install redis-tools with "
                        "scripts/install-deps.sh; tests never skip without it.\n",
                strerror(errno));
        _exit(127);
    }
    /* redis-cli waits itself until the nodes agree on the configuration ("Waiting for the
     * cluster to join"), and its own timeout ends it. */
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "harness: redis-cli --cluster create failed (status %d); see %s\n",
                status, log);
        th_cluster_stop(c);
        exit(1);
    }
}

void th_cluster_start(th_cluster *c, int masters, int replicas_per_master,
                      const char *password)
{
    memset(c, 0, sizeof *c);
    /* redis-cli --cluster create wants 3 masters at least. */
    if (masters < 3 || replicas_per_master < 0 ||
        masters * (1 + replicas_per_master) > TH_MAX_NODES) {
        fprintf(stderr, "harness: a cluster has 3 or more masters and at most %d nodes\n",
                TH_MAX_NODES);
        exit(1);
    }
    c->masters = masters;
    c->nnodes = masters * (1 + replicas_per_master);
    if (password != NULL) {
        snprintf(c->password, sizeof c->password, "%s", password);
    }
    th_tempdir(c->dir, sizeof c->dir, "cluster");

    for (int i = 0; i < c->nnodes; i++) {
        th_redis *r = &c->nodes[i];
        /* As th_redis_start(r, 1, password) (AOF, appendfsync always), in cluster mode. */
        th__node_init(r, "cluster-node", 1, password);
        th__node_arg(r, "--cluster-enabled");
        th__node_arg(r, "yes");
        th__node_arg(r, "--cluster-config-file");
        th__node_arg(r, "nodes.conf");
        th__node_arg(r, "--cluster-node-timeout");
        th__node_arg(r, CLUSTER_NODE_TIMEOUT);
        /* Let any replica take over, however long it was cut off: a test kills masters on
         * purpose and wants the failover, not a cluster that stays down. */
        th__node_arg(r, "--cluster-replica-validity-factor");
        th__node_arg(r, "0");
        /* A full sync starts at once, not after the default 5 s wait for more replicas (see
         * harness_sentinel.c). */
        th__node_arg(r, "--repl-diskless-sync-delay");
        th__node_arg(r, "0");
        if (c->password[0] != '\0') {
            th__node_arg(r, "--masterauth");
            th__node_arg(r, c->password);
        }
        th__node_spawn(r, 1);
    }
    cluster_create(c, replicas_per_master);

    for (int i = 0; i < c->nnodes; i++) {
        char id[64];
        if (th_redis_cmd(&c->nodes[i], id, sizeof id, "CLUSTER MYID") != 0 || id[0] == '\0') {
            fprintf(stderr, "harness: CLUSTER MYID failed on port %d\n", c->nodes[i].port);
            th_cluster_stop(c);
            exit(1);
        }
        snprintf(c->ids[i], sizeof c->ids[i], "%s", id);
    }

    th__append(c->url, sizeof c->url, "redis-cluster://");
    if (c->password[0] != '\0') {
        th__append(c->url, sizeof c->url, ":%s@", c->password);
    }
    for (int i = 0; i < c->nnodes; i++) {
        th__append(c->url, sizeof c->url, "%s127.0.0.1:%d", i > 0 ? "," : "",
                   c->nodes[i].port);
    }

    if (wait_whole(c, CLUSTER_START_TIMEOUT_MS) != 0) {
        fprintf(stderr, "harness: the cluster was not whole (state ok, every slot, every node, "
                        "replicas linked) within %d ms; see %s/create.log\n",
                CLUSTER_START_TIMEOUT_MS, c->dir);
        th_cluster_stop(c);
        exit(1);
    }
}

/* Runs one CLUSTER SETSLOT on node i; returns 0 when it answered OK. */
static int setslot(const th_cluster *c, int i, int slot, const char *how, const char *id)
{
    char out[256];
    long long rc = th_redis_cmd(&c->nodes[i], out, sizeof out, "CLUSTER SETSLOT %d %s %s", slot,
                                how, id);
    if (rc != 0 || strcmp(out, "OK") != 0) {
        fprintf(stderr, "harness: CLUSTER SETSLOT %d %s on port %d: %s\n", slot, how,
                c->nodes[i].port, out);
        return -1;
    }
    return 0;
}

int th_cluster_migrate_begin(th_cluster *c, int slot, int src, int dst)
{
    /* Importing first: once the source says MIGRATING it sends clients to dst with -ASK,
     * and dst must already accept them (Redis cluster spec, "Live reconfiguration"). */
    if (setslot(c, dst, slot, "IMPORTING", c->ids[src]) != 0) {
        return -1;
    }
    return setslot(c, src, slot, "MIGRATING", c->ids[dst]);
}

int th_cluster_migrate_keys(th_cluster *c, int slot, int src, int dst)
{
    int moved = 0;

    for (;;) {
        redisReply *keys = th__node_command(&c->nodes[src], "CLUSTER GETKEYSINSLOT %d 100", slot);
        const char *argv[16 + 100];
        char port[16];
        int n = 0;

        if (keys == NULL || keys->type != REDIS_REPLY_ARRAY) {
            fprintf(stderr, "harness: CLUSTER GETKEYSINSLOT %d failed on port %d\n", slot,
                    c->nodes[src].port);
            freeReplyObject(keys);
            return -1;
        }
        if (keys->elements == 0) {
            freeReplyObject(keys);
            return moved;
        }
        snprintf(port, sizeof port, "%d", c->nodes[dst].port);
        argv[n++] = "MIGRATE";
        argv[n++] = "127.0.0.1";
        argv[n++] = port;
        argv[n++] = ""; /* the key goes after KEYS */
        argv[n++] = "0";
        argv[n++] = "5000";
        if (c->password[0] != '\0') {
            argv[n++] = "AUTH";
            argv[n++] = c->password;
        }
        argv[n++] = "KEYS";
        for (size_t k = 0; k < keys->elements; k++) {
            argv[n++] = keys->element[k]->str;
        }
        redisReply *reply = th__node_command_argv(&c->nodes[src], n, argv);
        int ok = reply != NULL && reply->type == REDIS_REPLY_STATUS &&
                 strcmp(reply->str, "OK") == 0;
        if (!ok) {
            fprintf(stderr, "harness: MIGRATE of slot %d to port %d: %s\n", slot,
                    c->nodes[dst].port, reply != NULL && reply->str != NULL ? reply->str : "?");
            freeReplyObject(reply);
            freeReplyObject(keys);
            return -1;
        }
        moved += (int)keys->elements;
        freeReplyObject(reply);
        freeReplyObject(keys);
    }
}

int th_cluster_migrate_finish(th_cluster *c, int slot, int src, int dst)
{
    /* The order of the cluster spec: the importing node first (it then owns the slot with
     * a bumped epoch), then the source (so it stops answering -ASK and answers -MOVED), then
     * the other masters, so that no master points clients at the old owner for long. */
    if (setslot(c, dst, slot, "NODE", c->ids[dst]) != 0 ||
        setslot(c, src, slot, "NODE", c->ids[dst]) != 0) {
        return -1;
    }
    for (int i = 0; i < c->nnodes; i++) {
        if (i != src && i != dst && c->nodes[i].pid > 0 && th__role_is(&c->nodes[i], "master") &&
            setslot(c, i, slot, "NODE", c->ids[dst]) != 0) {
            return -1;
        }
    }
    return 0;
}

void th_cluster_kill(th_cluster *c, int i)
{
    th_redis_kill(&c->nodes[i]);
}

/* A slot that `node` served before it was killed, as a running node saw it; -1 if none. */
static int a_slot_of(const th_cluster *c, int node, int from)
{
    redisReply *reply = th__node_command(&c->nodes[from], "CLUSTER SHARDS");
    int slot = -1;

    for (size_t s = 0; reply != NULL && reply->type == REDIS_REPLY_ARRAY &&
                       s < reply->elements && slot < 0;
         s++) {
        const redisReply *nodes = th__map_get(reply->element[s], "nodes");
        const redisReply *slots = th__map_get(reply->element[s], "slots");
        for (size_t n = 0; nodes != NULL && n < nodes->elements && slot < 0; n++) {
            if (strcmp(th__map_str(nodes->element[n], "id"), c->ids[node]) == 0 &&
                slots != NULL && slots->elements >= 2) {
                slot = (int)slots->element[0]->integer;
            }
        }
    }
    freeReplyObject(reply);
    return slot;
}

int th_cluster_wait_failover(th_cluster *c, int killed, int timeout_ms)
{
    int64_t deadline = th_now_ms() + timeout_ms;
    int slot = -1;
    int first = -1;

    for (int i = 0; i < c->nnodes && first < 0; i++) {
        first = c->nodes[i].pid > 0 ? i : -1;
    }
    /* The killed master's shard (its replicas are listed in it) tells which slots to watch;
     * after the takeover, the shard is the same with another master. */
    slot = first < 0 ? -1 : a_slot_of(c, killed, first);
    if (slot < 0) {
        fprintf(stderr, "harness: node %d serves no slot that the cluster knows of\n", killed);
        return -1;
    }
    for (;;) {
        int owner = -1;
        int ok = cluster_whole(c);
        for (int i = 0; i < c->nnodes && ok; i++) {
            int o = 0;
            if (c->nodes[i].pid <= 0) {
                continue;
            }
            o = th_cluster_slot_owner(c, i, slot);
            ok = o >= 0 && o != killed && c->nodes[o].pid > 0 && (owner < 0 || o == owner);
            owner = o;
        }
        if (ok && th__role_is(&c->nodes[owner], "master")) {
            return owner;
        }
        if (th_now_ms() > deadline) {
            return -1;
        }
        th_nap_ms(50);
    }
}

int th_cluster_wait_ok(th_cluster *c, int timeout_ms)
{
    return wait_whole(c, timeout_ms);
}

int th_cluster_restart(th_cluster *c, int i, int timeout_ms)
{
    if (c->nodes[i].pid > 0) {
        return -1;
    }
    th_redis_restart(&c->nodes[i]);
    return wait_whole(c, timeout_ms);
}

void th_cluster_stop(th_cluster *c)
{
    for (int i = 0; i < c->nnodes; i++) {
        th_redis_stop(&c->nodes[i]);
    }
    c->nnodes = 0;
    th_rmtree(c->dir);
}
