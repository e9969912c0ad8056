/*
 * Test harness shared by every test program: a real redis-server started on a free loopback
 * port in a private temp directory and stopped by its PID, plus small helpers for
 * deadline-bounded waiting. Nothing here mocks Redis.
 *
 * It also starts whole topologies of real servers, every node a child
 * process configured as th_redis_start(r, 1, password) configures one (AOF, appendfsync
 * always), so figures and behaviour compare with the single Redis:
 *   - th_redis_set_start: N independent masters (Redlock);
 *   - th_sentinel_start: a master, its replicas and their sentinels (harness_sentinel.c);
 *   - th_cluster_start: a Redis Cluster built by redis-cli --cluster create
 *     (harness_cluster.c).
 * Starting fails the process loudly (exit 1 with a message), never skips; a server left
 * running at exit is killed. Waiting for a failover returns -1 on timeout for the test to
 * assert on.
 */
#ifndef FG_TEST_HARNESS_H
#define FG_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <libpq-fe.h>

/* Most nodes one topology (sentinel set, cluster, Redis set) may have. */
#define TH_MAX_NODES 16
/* Most extra command-line arguments of one node (replicaof, cluster options). */
#define TH_NODE_ARGS 16
/* A cluster node's bus listens on its port + this. */
#define TH_CLUSTER_BUS_OFFSET 10000

typedef struct th_redis {
    pid_t pid;            /* 0 once killed or stopped */
    int port;
    char dir[256];        /* private temp dir: data, AOF, log */
    char url[128];        /* redis://127.0.0.1:<port> (with :password@ when set) */
    char password[64];    /* "" for none */
    int appendonly;       /* 1: AOF on with appendfsync always */
    int sentinel;         /* 1: a redis-sentinel on <dir>/sentinel.conf, not a redis-server */
    int nargs;            /* extra arguments after the usual ones, kept for restarts */
    char args[TH_NODE_ARGS][80];
} th_redis;

/* Monotonic clock in milliseconds. */
int64_t th_now_ms(void);

/* Sleeps about ms milliseconds (used only inside deadline loops, never to synchronise). */
void th_nap_ms(int ms);

/* Makes a private temp dir (mkdtemp) named after `tag` into buf. Aborts the test on error. */
void th_tempdir(char *buf, size_t len, const char *tag);

/* Removes a directory tree (used by teardown). */
void th_rmtree(const char *dir);

/* A TCP port on 127.0.0.1 that was free a moment ago. */
int th_free_port(void);

/* Starts redis-server on a free port in a new temp dir. appendonly: 1 for AOF with
 * appendfsync always. password may be NULL. Fails the process loudly (exit 1 with a message)
 * when redis-server is missing or does not answer PING within 10 s. */
void th_redis_start(th_redis *r, int appendonly, const char *password);

/* Starts it again on the same port and dir (after th_redis_kill), keeping its files. */
void th_redis_restart(th_redis *r);

/* SIGKILL and reap; files stay. */
void th_redis_kill(th_redis *r);

/* Deletes the AOF and RDB files in its dir (call after th_redis_kill): a total data loss. */
void th_redis_wipe_files(th_redis *r);

/* SIGTERM, wait up to 5 s, SIGKILL if needed, remove the temp dir. */
void th_redis_stop(th_redis *r);

/* Runs one command through a fresh hiredis connection and returns the integer reply, or
 * -1 on error; the string reply, if any, is copied into out (outlen bytes, may be NULL).
 * For test setup and inspection only. */
long long th_redis_cmd(const th_redis *r, char *out, size_t outlen, const char *fmt, ...);

/* Script calls r has served so far, EVALSHA plus EVAL (INFO commandstats), or -1 when it
 * cannot be read. */
long long th_redis_script_calls(const th_redis *r);

/* What r's scripts have done so far (INFO commandstats): EVALSHA calls, the microseconds
 * Redis spent in them (a script's time includes every command it calls, and no fsync), and
 * the data commands run (every command but the server's own: INFO, CONFIG, SCRIPT, CLIENT,
 * PING, HELLO, SELECT, AUTH, COMMAND, SUBSCRIBE, UNSUBSCRIBE, WAIT), which on a Redis only
 * scripts write to are the commands its scripts called. Returns 0, or -1 when it cannot be
 * read. */
typedef struct th_script_stats {
    long long calls, usec, cmds;
} th_script_stats;
int th_redis_script_stats(const th_redis *r, th_script_stats *out);

/* How many TCP connections to r hold bytes r has not read yet (the kernel's receive queue,
 * /proc/net/tcp), open or closed by the client since (ESTABLISHED or CLOSE_WAIT on r's
 * side): with r stopped (SIGSTOP), how many connections have sent it something since. -1
 * when /proc/net/tcp cannot be read. */
int th_redis_unread_conns(const th_redis *r);

/* A real PostgreSQL 15 server: initdb into a private temp dir (as the postgres user when the
 * tests run as root, since initdb refuses root), the postmaster started directly (pid is its
 * own, not a wrapper's) on a free loopback port with its Unix socket in the temp dir. The
 * superuser "postgres" authenticates with `password` over TCP (scram-sha-256) and without one
 * over the socket. */
typedef struct th_pg {
    pid_t pid;            /* the postmaster */
    int port;
    char dir[256];        /* temp dir: data/, the socket, postgres.log */
    char bindir[256];     /* where initdb and postgres are */
    char password[64];
    char small_disk[256]; /* th_pg_small_disk's mount point, "" for none */
} th_pg;

/* initdb and start. Fails the process loudly (exit 1 with a message) when initdb is missing
 * (looked for in /usr/lib/postgresql/15/bin, then `pg_config --bindir`) or the server does
 * not accept connections within 30 s. */
void th_pg_start(th_pg *pg);

/* Starts it again on the same port and data (after th_pg_kill or th_pg_crash). */
void th_pg_restart(th_pg *pg);

/* SIGKILL the postmaster and every process it started, reap it, and wait until every one
 * has exited: a crash of the whole server, so no backend serves its connection, or holds
 * its socket open, a moment longer. */
void th_pg_kill(th_pg *pg);

/* Sends sig to the postmaster and every process it started (SIGSTOP/SIGCONT: a frozen
 * server whose sockets stay open). */
void th_pg_signal(th_pg *pg, int sig);

/* SIGQUIT the postmaster (pg_ctl stop -m immediate) and reap it. */
void th_pg_stop_immediate(th_pg *pg);

/* SIGTERM, wait up to 10 s, SIGKILL if needed, remove the temp dir. */
void th_pg_stop(th_pg *pg);

/* Mounts a tmpfs of `bytes` bytes at <temp dir>/small-disk, owned by the server's user, and
 * writes its path into buf: a real file system that really fills up, for a tablespace
 * (CREATE TABLESPACE ... LOCATION buf) whose writes then fail with ENOSPC, SQLSTATE 53100.
 * Mounting needs root (CAP_SYS_ADMIN): without it, or when the mount fails, the process
 * exits 1 with a message, never skips. th_pg_stop() unmounts it. One per server. */
void th_pg_small_disk(th_pg *pg, size_t bytes, char *buf, size_t len);

/* How many lines of the server's log (<temp dir>/postgres.log) contain `what`: what the
 * server itself said happened (a deadlock, a full disk). Fails the process when the log
 * cannot be read. */
int th_pg_log_count(const th_pg *pg, const char *what);

/* Writes postgresql://postgres:<password>@127.0.0.1:<port>/<db> into buf. */
void th_pg_url(const th_pg *pg, const char *db, char *buf, size_t len);

/* Runs sql as the superuser in database "postgres" over the socket. Returns 0, or -1 after
 * printing the server's error. */
int th_pg_exec(const th_pg *pg, const char *sql);

/* Runs sql on conn. Returns 0, or -1 after printing the server's error. */
int th_pq_exec(PGconn *conn, const char *sql);

/* Installs in conn's database a deferred trigger that holds back the COMMIT of every
 * transaction writing a fencegate_resources row named prefix...: at the COMMIT it waits for
 * advisory lock key, through any cancel (the session's statement_timeout), so a session that
 * holds the lock keeps such a commit from finishing, and the commit is made once the lock is
 * free: an answer lost after its COMMIT was sent, on demand. Returns 0 or -1 (printed). */
int th_pg_hold_commits(PGconn *conn, const char *prefix, long key);

/* ---- Redlock: N independent masters ------------------------------------------------------ */

typedef struct th_redis_set {
    int n;
    th_redis nodes[TH_MAX_NODES]; /* kill, restart, wipe one with th_redis_kill(&s->nodes[i]) … */
    char urls[TH_MAX_NODES * 160]; /* the nodes' redis:// URLs, comma-separated */
} th_redis_set;

/* Starts n (1 to TH_MAX_NODES) independent redis-servers, each exactly as
 * th_redis_start(r, 1, password) does: AOF on with appendfsync always. Exits loudly on
 * failure. */
void th_redis_set_start(th_redis_set *s, int n, const char *password);

/* th_redis_stop on every node (killed ones too: their dirs are removed). */
void th_redis_set_stop(th_redis_set *s);

/* ---- Sentinel: 1 master, R replicas, M sentinels (harness_sentinel.c) -------------------- */

typedef struct th_sentinel {
    char master_name[64];
    char password[64];             /* guards data nodes and sentinels alike; "" for none */
    int nredis;                    /* 1 + replicas */
    th_redis redis[TH_MAX_NODES];  /* redis[0] is the first master; AOF on, appendfsync always */
    int nsentinels;
    th_redis sentinels[TH_MAX_NODES];
    int quorum;                    /* nsentinels / 2 + 1 */
    /* redis-sentinel://[:password@]127.0.0.1:p1,127.0.0.1:p2,.../MASTERNAME */
    char url[TH_MAX_NODES * 32 + 192];
} th_sentinel;

/* Starts the master, `replicas` replicas (replicaof the master) and `sentinels` sentinels
 * (quorum sentinels/2+1, down-after-milliseconds 3000, failover-timeout 5000), each in its
 * own temp dir on a free port. Returns once every sentinel reports the master, every replica
 * (linked, master-link-status ok) and every other sentinel: only then can a failover pick a
 * replica. Exits loudly on failure (redis-sentinel missing, no agreement within 30 s). */
void th_sentinel_start(th_sentinel *s, const char *master_name, int replicas, int sentinels,
                       const char *password);

/* Index in s->redis of the master that the sentinels agree on (every running sentinel
 * answers SENTINEL get-master-addr-by-name with the same address, one of ours), or -1. */
int th_sentinel_master(const th_sentinel *s);

/* SIGKILLs the current master (th_sentinel_master) and returns its index, or -1 when the
 * sentinels agree on none. */
int th_sentinel_kill_master(th_sentinel *s);

/* Waits up to timeout_ms until the running sentinels agree on a master other than
 * old_master that answers ROLE as master. Returns its index, or -1 on timeout. */
int th_sentinel_wait_failover(th_sentinel *s, int old_master, int timeout_ms);

/* Waits up to timeout_ms until the start() condition holds again for the current master:
 * every running sentinel names it and lists every other running data node as its linked,
 * healthy replica, and knows the other running sentinels. Call it after a failover before
 * killing the new master: a replica not yet moved to it cannot be promoted. Returns 0, or -1
 * on timeout (or when the sentinels agree on no master). */
int th_sentinel_wait_ready(th_sentinel *s, int timeout_ms);

/* Restarts killed node i (same port and files) as a replica of the current master and waits
 * up to timeout_ms until it is linked and every sentinel lists it healthy again. Returns 0,
 * or -1 on timeout (or when there is no agreed master). */
int th_sentinel_restart_replica(th_sentinel *s, int i, int timeout_ms);

/* Stops every sentinel, then every data node, by PID; removes their dirs. */
void th_sentinel_stop(th_sentinel *s);

/* ---- Redis Cluster (harness_cluster.c) --------------------------------------------------- */

#define TH_CLUSTER_SLOTS 16384

typedef struct th_cluster {
    int nnodes;                    /* masters * (1 + replicas_per_master) */
    int masters;
    char password[64];
    th_redis nodes[TH_MAX_NODES];  /* AOF on, appendfsync always, cluster-node-timeout 1000 */
    char ids[TH_MAX_NODES][64];    /* CLUSTER MYID of each node (40 hex digits) */
    char dir[256];                 /* redis-cli --cluster create's output (create.log) */
    /* redis-cluster://[:password@]127.0.0.1:p1,127.0.0.1:p2,... (every node) */
    char url[TH_MAX_NODES * 32 + 128];
} th_cluster;

/* Starts masters * (1 + replicas_per_master) nodes with cluster-enabled yes, each on a free
 * port whose bus port is free too, joins them with redis-cli --cluster create
 * --cluster-replicas R --cluster-yes, and returns once every node says cluster_state:ok with
 * all 16384 slots ok, knows every node, and every replica is linked to its master. Exits
 * loudly on failure. */
void th_cluster_start(th_cluster *c, int masters, int replicas_per_master,
                      const char *password);

/* CRC16/XMODEM (polynomial 0x1021, initial value 0), the Redis Cluster key hash. */
uint16_t th_crc16(const char *buf, size_t len);

/* A key's hash slot: CRC16 of its hash tag (the bytes between the first '{' and the next
 * '}', when not empty) or of the whole key, mod 16384. */
int th_key_slot(const char *key, size_t len);

/* Index in c->nodes of the master serving slot as node `from` sees it (CLUSTER SHARDS), or
 * -1 (from not running, no such master). */
int th_cluster_slot_owner(const th_cluster *c, int from, int slot);

/* Index in c->nodes of the node with this port, or -1. */
int th_cluster_node_by_port(const th_cluster *c, int port);

/* Moving one slot to master dst, in three steps a test can stop between:
 *   1. begin: CLUSTER SETSLOT slot IMPORTING on dst, then MIGRATING on the owner. From here
 *      the owner answers -ASK for a key of the slot it does not hold.
 *   2. keys: MIGRATE ... KEYS every key the owner still holds in the slot (GETKEYSINSLOT).
 *      Returns the number moved.
 *   3. finish: CLUSTER SETSLOT slot NODE dst on dst, the old owner, then every other master.
 * Each returns -1 on any error (printed to stderr), src being the owner when begin ran. */
int th_cluster_migrate_begin(th_cluster *c, int slot, int src, int dst);
int th_cluster_migrate_keys(th_cluster *c, int slot, int src, int dst);
int th_cluster_migrate_finish(th_cluster *c, int slot, int src, int dst);

/* SIGKILLs node i (files stay). */
void th_cluster_kill(th_cluster *c, int i);

/* After killing master `killed`: waits up to timeout_ms until every running node says
 * cluster_state:ok and sees the slots killed served by another running node that answers
 * ROLE as master. Returns that node's index, or -1 on timeout. */
int th_cluster_wait_failover(th_cluster *c, int killed, int timeout_ms);

/* Waits up to timeout_ms until every running node sees the whole cluster as at the end of
 * th_cluster_start (a killed node still counts as known). Returns 0, or -1 on timeout. */
int th_cluster_wait_ok(th_cluster *c, int timeout_ms);

/* Restarts killed node i (same port, nodes.conf and AOF): it rejoins as a replica. Waits up
 * to timeout_ms for the cluster to be whole again as th_cluster_start does. Returns 0 or -1. */
int th_cluster_restart(th_cluster *c, int i, int timeout_ms);

/* Stops every node by PID and removes the dirs. */
void th_cluster_stop(th_cluster *c);

#endif
