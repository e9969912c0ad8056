/*
 * The gateway's configuration (config.c): limits, timeouts and the parsed flags. Bottom layer:
 * includes nothing of the gateway.
 */
#ifndef GATEWAY_CONFIG_H
#define GATEWAY_CONFIG_H

#include <stddef.h>
#include <stdio.h>
#include <sys/socket.h>

#ifndef FENCEGATE_VERSION
#define FENCEGATE_VERSION "0.0.0"
#endif

#define GW_JSON_BODY_MAX (16 * 1024)     /* JSON request bodies over this are a 413 */
/* POST /resources: 1 to GW_TXN_WRITES_MAX writes (storage's STORE_TXN_MAX), each value at
 * most --max-value-bytes, and the body within gw__config_txn_body_max(). */
#define GW_TXN_WRITES_MAX 64
#define GW_TXN_BODY_CAP ((size_t)16 * 1024 * 1024) /* the global cap of a transaction body */
#define GW_TXN_WRITE_FIELDS 1024                    /* room for a write's other fields */
/* A body over its cap is read and dropped before the 413 (clients that write the whole
 * request before reading would otherwise see a reset, not the answer), up to this many
 * bytes past the cap; a longer one is answered at once, or its connection closed. */
#define GW_DRAIN_MAX (8 * 1024 * 1024)
/* The shortest Idempotency-Key accepted: a key is a credential (it replays the first answer,
 * owner included, to whoever sends it again), so it must not be guessable. */
#define GW_IDEM_KEY_MIN 16
#define GW_DEFAULT_TTL_MS 30000
#define GW_MAX_WAIT_MS 60000
#define GW_DRAIN_MS 10000                /* how long SIGTERM waits for in-flight requests */
/* After a Redis call takes more than half its timeout (Redis stalled or crawling), the
 * others fail fast (503) this long, then one probes (lk_breaker_new()): a stall costs each
 * server thread about one timeout, not one per request queued on it, which keeps every
 * answer within wait_ms + 5 s. */
#define GW_BREAKER_OPEN_MS 500
/* How long past its deadline (now + wait_ms) a lock attempt may wait for its resource's
 * floor stripe lock before answering 503: bounds the queue of attempts on one resource
 * behind a slow (not stalled) Redis. */
#define GW_STRIPE_GRACE_MS 1000
/* --token-key-idle-ttl: a resource's token keys in Redis expire this long, or up to a 24th
 * more, after its last grant or renewal (lk_options.token_key_idle_ttl_ms, whose slack spares
 * the grants after a renewed expiry their writes), so names used once do not stay in
 * Redis forever. Days, so the keys of any resource in regular use stay; the ledger floor
 * keeps tokens increasing after they expire (fence.c). The maximum is 10 years. */
#define GW_TOKEN_KEY_IDLE_TTL_DEFAULT_MS (7LL * 86400000)
#define GW_TOKEN_KEY_IDLE_TTL_MAX_MS (3650LL * 86400000)
#define GW_CONN_TIMEOUT_S 30             /* idle connection timeout */
/* A request must be received in full (request line, headers and body) within this many
 * seconds of its start: the connection's accept for its first request, the request line for
 * a later one on a kept-alive connection. The idle timeout above restarts with every byte, so
 * alone it does not stop a client trickling a byte a second (http/conns.c). */
#define GW_REQUEST_DEADLINE_S 10
/* libmicrohttpd's memory pool per connection: the request line and headers and the answer's
 * headers live in it (bodies are streamed into our own buffers). Its default, 32 KiB, is all
 * touched once a keep-alive connection has served a request, so 10,000 parked waiters would
 * cost 320 MiB. At 3 KiB a parked waiter costs about 4.3 KiB in all, most of it this pool
 * (tests/bench/handoff_bench), and a request may carry about 2.5 KiB of request line and
 * headers; libmicrohttpd refuses a larger one with 431 (its own short HTML body, not our
 * JSON: it answers before we see it). */
#define GW_CONN_MEMORY (3 * 1024)

typedef struct gw_config {
    char listen[256];            /* HOST:PORT or [V6]:PORT */
    char redis_url[1024];
    char data_dir[1024];
    char store_url[1024];        /* --store: "" for LMDB in data_dir (store_options.url) */
    char auth_token_file[1024];  /* "" when auth is off */
    char clients_file[1024];     /* --clients: "" for none */
    char tls_cert[1024];         /* --tls-cert, --tls-key: "" for plain HTTP */
    char tls_key[1024];
    char tls_client_ca[1024];    /* --tls-client-ca: "" for no client certificates */
    size_t max_value_bytes;
    size_t map_size;             /* LMDB map size in bytes (--map-size) */
    int threads;
    int max_connections;
    int max_waiters;             /* --max-waiters: parked /lock waiters at once, below
                                  * max_connections (0 before parsing: 3/4 of it) */
    int max_connections_per_address; /* --max-connections-per-address, 0: no limit (-1
                                      * before parsing: half of max_connections) */
    int waiters_derived;         /* max_waiters was not given: derived from max_connections */
    int per_address_derived;     /* the same for max_connections_per_address */
    long long token_key_idle_ttl_ms; /* --token-key-idle-ttl, 0: never */
    long long max_ttl_ms;        /* --max-ttl: the largest ttl_ms granted; on Redlock also
                                  * the hold-out of a node that lost its data */
    int redis_min_replicas;      /* locklib's min_replicas (--redis-min-replicas), 0: off */
    int log_json;                /* 1: --log-format json */
    /* What to do instead of serving. */
    int help;
    int version;
    int routes;
    int check_config;
} gw_config;

/* Fills cfg from the environment (FENCEGATE_*), then from argv (flags override env).
 * Returns 0, or -1 with a message naming the bad flag, variable or value in err (one line of
 * printable ASCII): the caller prints it and exits 2. Never exits by itself, so fuzzers can
 * call it. */
int gw__config_parse(gw_config *cfg, int argc, char **argv, char *err, size_t errlen);

/* Lowers max_connections to fit (2 or more, below it; main.c, when the open-file limit
 * cannot hold it): the limits derived from it are derived again, and given ones it can no
 * longer hold come down with it (waiters below it, one address at most all of it). */
void gw__config_fit_connections(gw_config *cfg, int fit);

/* Prints the --help text (every flag with its environment variable) to f. */
void gw__config_usage(FILE *f, const char *argv0);

/* The body cap of a POST /resources: GW_TXN_WRITES_MAX values of max_value_bytes each as
 * base64, plus GW_TXN_WRITE_FIELDS each for their other fields, at most GW_TXN_BODY_CAP. */
size_t gw__config_txn_body_max(const gw_config *cfg);

/* Resolves cfg->listen into *addr. Returns 0 or -1 with err. */
int gw__config_listen_addr(const char *listen, struct sockaddr_storage *addr, char *err,
                          size_t errlen);

/* Copies a Redis URL without its user:password part into out, for logs. */
void gw__config_redact_url(const char *url, char *out, size_t outlen);

#endif
