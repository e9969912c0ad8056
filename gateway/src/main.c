/*
 * fencegate: the gateway process. Parses flags and environment, opens storage, serves HTTP
 * until SIGTERM or SIGINT, then shuts down gracefully.
 *
 * Exit status: 0 after a clean shutdown (and for --help, --version, --routes), 2 for a bad
 * flag, variable or value, 1 when it cannot start (storage cannot be opened, the address
 * cannot be bound, the open-file limit leaves room for fewer than two connections).
 * --check-config exits 0, 2 or 1 as start-up would before serving (the open-file limit
 * included; not the storage or the address).
 *
 * Signals are handled by sigwait() in the main thread, never by a handler: SIGTERM,
 * SIGINT and SIGHUP (which reads the clients again) are blocked before any thread starts,
 * so every thread inherits the mask and only the main thread ever receives them. SIGPIPE is ignored; a client that goes away must not
 * kill the process.
 */
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/config.h"
#include "base/routes.h"
#include "http/request.h"
#include "http/server.h"
#include "http/tls.h"
#include "ops/admin_release.h"
#include "ops/health.h"
#include "ops/lock.h"
#include "ops/lock_attempt.h"
#include "ops/lock_status.h"
#include "ops/locks_list.h"
#include "ops/owner_calls.h"
#include "ops/resources.h"
#include "ops/sessions.h"
#include "ops/transaction.h"
#include "ops/ui.h"
#include "rt/log.h"
#include "token_file.h"

static gw_server server;
static gw_tls tls;

/* Each route's operation, in the order of gw_route_id. */
static const gw_op *const route_ops[GW_R_COUNT] = {
    &gw__op_lock,         &gw__op_unlock,       &gw__op_renew,
    &gw__op_lock_status,  &gw__op_resource_get, &gw__op_resource_put,
    &gw__op_healthz,      &gw__op_readyz,       &gw__op_metrics,
    &gw__op_livez,        &gw__op_locks_list,   &gw__op_admin_release,
    &gw__op_ui,           &gw__op_ui,
    &gw__op_transaction,  &gw__op_resource_delete,
    &gw__op_sessions,     &gw__op_sessions,     &gw__op_sessions,     &gw__op_sessions,
};

/* Opens a Redis client once, to check the URL and report whether Redis answers. Redis being
 * down is not fatal: the gateway starts and /readyz reports it. Returns 0, or -1 for a URL
 * locklib refuses. */
static int probe_redis(const gw_config *cfg, const lk_options *opts, int quiet)
{
    lk_client *c = NULL;
    char shown[1100];
    lk_status st = lk_client_open(&c, cfg->redis_url, opts);

    gw__config_redact_url(cfg->redis_url, shown, sizeof shown);
    if (c == NULL) {
        fprintf(stderr, "fencegate: --redis: cannot use '%s': %s%s\n", shown, lk_status_str(st),
                strncmp(cfg->redis_url, "redlock://", 10) != 0 ? ""
                : opts->min_replicas > 0
                    ? " (--redis-min-replicas does not apply: Redlock's masters have no replicas)"
                    : " (redlock:// takes an odd number of host:port, 3 to 15)");
        return -1;
    }
    if (!quiet && st == LK_OK) {
        st = lk_ping(c);
    }
    if (!quiet && st != LK_OK) {
        gw__log_event(cfg, "warn", "redis at %s is unavailable (%s); serving anyway, lock calls "
                                   "answer 503 until it is back", shown, lk_errstr(c));
    }
    lk_client_close(c);
    return 0;
}

/* The clients --clients or --auth-token-file give, read afresh (at start and on SIGHUP):
 * *out is NULL when neither is given. Returns 0, or -1 with err naming the file and the
 * problem. */
static int load_clients(const gw_config *cfg, gw_clients **out, char *err, size_t errlen)
{
    *out = NULL;
    if (cfg->clients_file[0] != '\0') {
        *out = gw__clients_load(cfg->clients_file, err, errlen);
        return *out != NULL ? 0 : -1;
    }
    if (cfg->auth_token_file[0] != '\0') {
        char token[FG_AUTH_TOKEN_MAX + 1];
        long n = fg_auth_token_read(cfg->auth_token_file, token, err, errlen);
        if (n < 0) {
            return -1;
        }
        *out = gw__clients_single(token, (size_t)n);
        memset(token, 0, sizeof token);
        if (*out == NULL) {
            snprintf(err, errlen, "--auth-token-file: out of memory");
            return -1;
        }
    }
    return 0;
}

/* SIGHUP: the clients file (or the token file) read again; a bad one is refused with a line
 * naming the problem, and the previous clients stay in force. */
static void reload_clients(const gw_config *cfg)
{
    char err[600];
    gw_clients *t = NULL;

    if (cfg->clients_file[0] == '\0' && cfg->auth_token_file[0] == '\0') {
        gw__log_event(cfg, "info", "SIGHUP: no --clients or --auth-token-file to read again");
        return;
    }
    if (load_clients(cfg, &t, err, sizeof err) != 0) {
        gw__log_event(cfg, "error", "SIGHUP: %s; the previous clients stay in force", err);
        return;
    }
    size_t n = t->n;
    gw__clients_swap(&server.clients, t);
    gw__log_event(cfg, "info", "SIGHUP: %s read again: %zu client(s), in force for new requests",
                  cfg->clients_file[0] != '\0' ? cfg->clients_file : cfg->auth_token_file, n);
}

/* Checks what can be checked without serving. Returns 0 or -1 after printing why. */
static int validate(gw_config *cfg, int quiet)
{
    char err[600];
    struct sockaddr_storage addr;

    if (gw__config_listen_addr(cfg->listen, &addr, err, sizeof err) != 0) {
        fprintf(stderr, "fencegate: %s\n", err);
        return -1;
    }
    gw_clients *clients = NULL;
    if (load_clients(cfg, &clients, err, sizeof err) != 0) {
        fprintf(stderr, "fencegate: %s\n", err);
        return -1;
    }
    gw__clients_swap(&server.clients, clients);
    if (cfg->tls_cert[0] != '\0') {
        if (gw__tls_load(cfg, &tls, err, sizeof err) != 0) {
            fprintf(stderr, "fencegate: %s\n", err);
            return -1;
        }
        server.tls = &tls;
    }
    /* The store URL's scheme and syntax, and its description for the logs; nothing is
     * opened (the database may not be up yet, and an LMDB directory may be in use). */
    store_options sopts;
    store_options_init(&sopts);
    sopts.url = cfg->store_url[0] != '\0' ? cfg->store_url : NULL;
    sopts.dir = cfg->data_dir;
    if (store_describe_options(&sopts, server.rt.store_desc, sizeof server.rt.store_desc, err,
                               sizeof err) != STORE_OK) {
        fprintf(stderr, "fencegate: --store: %s\n", err);
        return -1;
    }
    lk_options_init(&server.rt.lk_opts);
    /* Safe only because every acquisition passes the ledger floor (fence.c). */
    server.rt.lk_opts.token_key_idle_ttl_ms = cfg->token_key_idle_ttl_ms;
    server.rt.lk_opts.min_replicas = cfg->redis_min_replicas;
    /* Redlock holds a node that lost its data out for the longest lease it may grant. */
    server.rt.lk_opts.redlock_max_lease_ms = cfg->max_ttl_ms;
    return probe_redis(cfg, &server.rt.lk_opts, quiet);
}

/* Opens the store --store names (LMDB in --data without one) into server.rt.st and describes
 * it, without the password, in server.rt.store_desc. Returns 0, or -1 after printing why (the
 * storage's own message never holds the password). */
static int open_store(const gw_config *cfg)
{
    char err[600];
    store_options sopts;

    store_options_init(&sopts);
    sopts.url = cfg->store_url[0] != '\0' ? cfg->store_url : NULL;
    sopts.dir = cfg->data_dir;
    sopts.max_value_bytes = cfg->max_value_bytes;
    sopts.map_size = cfg->map_size;
    store_status sst = store_open(&server.rt.st, &sopts, err, sizeof err);
    if (sst != STORE_OK) {
        fprintf(stderr, "fencegate: %s: %s: %s\n",
                cfg->store_url[0] != '\0' ? "--store" : "--data", store_status_str(sst), err);
        return -1;
    }
    store_describe(server.rt.st, server.rt.store_desc, sizeof server.rt.store_desc);
    gw__log_event(cfg, "info", "store: %s", server.rt.store_desc);
    return 0;
}

/* Raises the open-file limit to its hard limit (every connection, parked waiters included,
 * is a descriptor, and the usual soft limit of 1024 is below the default
 * --max-connections), and lowers --max-connections when even that leaves too few
 * descriptors, with a warning. A loop that runs out of descriptors at accept (EMFILE)
 * stops accepting until one of its own connections closes (libmicrohttpd's at_limit; a
 * loop holding none would spin), and the gateway's own descriptors (a Redis reconnect, a
 * store file) would fail with it. A daemon at its connection limit stops accepting
 * instead, and takes new connections again as soon as any of its own closes (loops.c), so
 * the limit must be reached before the descriptors run out. Returns 0, or -1 (said on
 * stderr) when the limit leaves no room for two connections. */
static int fit_fd_limit(gw_config *cfg)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        return 0;
    }
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl); /* on failure the old limit stays: handled below */
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    /* Room for what the gateway opens itself: the listener, each loop's epoll set and two
     * wake-up channels, the store's files or PostgreSQL connections (at most 8), the log,
     * and the Redis connections of each lk_client (the pipelines' threads, the side
     * threads', each loop's own, the waiters' subscriber): one on a single Redis, two on
     * Sentinel (the master and a sentinel's +switch-master hint), one per node on Redlock
     * (the URL's commas count them) and per master on a Cluster (at most
     * 32, locklib's LK__CLUSTER_NODES). 25 on one Redis with 4 loops, measured; this is 88
     * there. */
    rlim_t loops = gw__server_loops(cfg), per_client = 1;
    if (strncmp(cfg->redis_url, "redis-cluster://", 16) == 0) {
        per_client = 32;
    } else if (strncmp(cfg->redis_url, "redis-sentinel://", 17) == 0) {
        per_client = 2;
    } else if (strncmp(cfg->redis_url, "redlock://", 10) == 0) {
        for (const char *p = cfg->redis_url; *p != '\0'; p++) {
            per_client += *p == ',';
        }
    }
    rlim_t reserve = 64 + 3 * loops + per_client * (8 + loops);
    if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= (rlim_t)cfg->max_connections + reserve) {
        return 0;
    }
    if (rl.rlim_cur < reserve + 2) {
        /* Two: one waiter (below --max-connections) and the /unlock it waits for. */
        fprintf(stderr, "fencegate: open-file limit %llu leaves too few descriptors for "
                        "connections: at least %llu needed (raise ulimit -n)\n",
                (unsigned long long)rl.rlim_cur, (unsigned long long)reserve + 2);
        return -1;
    }
    int old = cfg->max_connections;
    gw__config_fit_connections(cfg, (int)(rl.rlim_cur - reserve));
    gw__log_event(cfg, "warn",
                  "open-file limit %llu: --max-connections lowered from %d to %d "
                  "(--max-waiters %d, --max-connections-per-address %d), so that "
                  "connections beyond it wait in the backlog instead of running the gateway "
                  "out of descriptors (raise ulimit -n for more)",
                  (unsigned long long)rl.rlim_cur, old, cfg->max_connections,
                  cfg->max_waiters, cfg->max_connections_per_address);
    return 0;
}

static int serve(gw_config *cfg, const sigset_t *stop_signals)
{
    char err[600];
    char shown[1100];
    int sig = 0;

    if (fit_fd_limit(cfg) != 0) {
        return 1;
    }
    if (open_store(cfg) != 0) {
        return 1;
    }
    /* The secret keys the owner a /lock without one derives from its Idempotency-Key
     * (generate_owner in http/args.c), so it must outlive the process: a retry that reaches the
     * gateway after a restart then derives the same owner and replays the first answer,
     * instead of a 422. The store keeps it (store_secret()). */
    store_status sst = store_secret(server.rt.st, server.owner_secret, err, sizeof err);
    if (sst != STORE_OK) {
        fprintf(stderr, "fencegate: store %s: %s\n", server.rt.store_desc, err);
        store_close(server.rt.st);
        return 1;
    }
    server.rt.fence.holder_key = server.owner_secret; /* before gw__server_start() */
    /* The operations run on the HTTP server and the fence: the server dispatches each route
     * to its operation, and the fence sends /lock's attempts through ops/lock's callbacks. */
    server.ops = route_ops;
    gw__fence_init(&server.rt.fence, server.rt.st, &gw__lock_fence_ops, &server.rt);
    atomic_store(&server.rt.metrics.redis_up, 1);
    atomic_store(&server.rt.metrics.store_up, 1); /* store_open() and store_secret() just worked */
    server.rt.metrics.max_connections = cfg->max_connections; /* as fitted above */
    server.rt.metrics.max_waiters = cfg->max_waiters;
    /* Shared by every server thread's Redis client; NULL (out of memory) just means none. */
    server.rt.lk_opts.breaker = lk_breaker_new(GW_BREAKER_OPEN_MS);
    server.rt.metrics.breaker = server.rt.lk_opts.breaker;
    /* The reaper fences through the fence and the store opened above; its tick starts with
     * the server (a --check-config run, which never gets here, claims no session). */
    if (gw__session_reaper_start(&server.rt)) {
        server.chore = gw__session_reap_tick;
        server.chore_ms = GW_SESSION_REAP_MS;
    }
    if (gw__server_start(&server, err, sizeof err) != 0) {
        fprintf(stderr, "fencegate: %s\n", err);
        store_close(server.rt.st);
        return 1;
    }
    gw__config_redact_url(cfg->redis_url, shown, sizeof shown);
    gw__log_event(cfg, "info",
                  "fencegate %s listening on %s (%s; redis %s, store %s, %u threads)",
                  FENCEGATE_VERSION, cfg->listen,
                  server.tls == NULL ? "plain HTTP"
                  : tls.ca_pem != NULL ? "HTTPS, client certificates required"
                                       : "HTTPS",
                  shown, server.rt.store_desc, gw__server_loops(cfg));
    for (;;) {
        if (sigwait(stop_signals, &sig) != 0) {
            continue;
        }
        if (sig != SIGHUP) {
            break;
        }
        reload_clients(cfg);
    }
    gw__log_event(cfg, "info", "signal %d: no new connections; finishing in-flight requests",
                  sig);
    gw__session_reaper_stop();
    if (gw__server_stop(&server, GW_DRAIN_MS) != 0) {
        /* A request is stuck past the drain deadline (a disk that does not answer). Nothing
         * unsafe is lost by leaving now: every acknowledged write is already durable, and a
         * lock whose answer is never sent expires with its lease. */
        gw__log_event(cfg, "warn", "%ld requests still running after %d ms; exiting anyway",
                      atomic_load(&server.inflight), GW_DRAIN_MS);
        gw__log_stop();
        _exit(0);
    }
    store_close(server.rt.st);
    lk_breaker_free(server.rt.lk_opts.breaker); /* every client using it is closed by now */
    gw__tls_free(&tls);
    gw__clients_swap(&server.clients, NULL); /* no request holds it any more */
    gw__log_event(cfg, "info", "stopped");
    return 0;
}

int main(int argc, char **argv)
{
    gw_config cfg;
    char err[600];
    sigset_t stop_signals;

    if (gw__config_parse(&cfg, argc, argv, err, sizeof err) != 0) {
        fprintf(stderr, "fencegate: %s\n", err);
        return 2;
    }
    server.rt.cfg = &cfg;
    if (cfg.help) {
        gw__config_usage(stdout, argv[0]);
        return 0;
    }
    if (cfg.version) {
        printf("fencegate %s\n", FENCEGATE_VERSION);
        return 0;
    }
    if (cfg.routes) {
        for (int i = 0; i < GW_R_COUNT; i++) {
            printf("%s %s %s %s\n", gw__routes[i].method, gw__routes[i].path,
                   gw__scope_name(gw__routes[i].scope),
                   gw__route_resource_name(gw__routes[i].resource));
        }
        /* HEAD is served wherever GET is (routes.c), and is in the OpenAPI as such. */
        for (int i = 0; i < GW_R_COUNT; i++) {
            if (strcmp(gw__routes[i].method, "GET") == 0) {
                printf("HEAD %s %s %s\n", gw__routes[i].path,
                       gw__scope_name(gw__routes[i].scope),
                       gw__route_resource_name(gw__routes[i].resource));
            }
        }
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    lk_sigpipe_ignored(); /* for good: locklib's writes need no SIGPIPE guard */
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGHUP); /* not a stop: reloads the clients (serve()) */
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    if (validate(&cfg, cfg.check_config) != 0) {
        return 2;
    }
    if (cfg.check_config) {
        /* What start-up would do with the open-file limit of this shell: lower the limits
         * (the warning says so) or refuse. */
        if (fit_fd_limit(&cfg) != 0) {
            return 1;
        }
        printf("fencegate: store %s\n", server.rt.store_desc);
        printf("fencegate: connections %d (waiters %d, per address %d)\n", cfg.max_connections,
               cfg.max_waiters, cfg.max_connections_per_address);
        printf("fencegate: configuration ok\n");
        return 0;
    }
    /* Lines are buffered from here (log.c); gw__log_stop() writes the rest, also after an
     * error. Without the flusher thread lines are written one by one, as before. */
    if (gw__log_start() != 0) {
        fprintf(stderr, "fencegate: cannot start the log thread; logging unbuffered\n");
    }
    int rc = serve(&cfg, &stop_signals);
    gw__log_stop();
    return rc;
}
