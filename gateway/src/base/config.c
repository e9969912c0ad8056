/*
 * Command line and environment: every flag has a FENCEGATE_* variable; the environment is
 * read first and flags override it. Nothing here exits or prints except
 * gw__config_usage(): errors are returned with a message naming the flag or variable, and
 * main() exits 2.
 */
#define _DEFAULT_SOURCE /* getaddrinfo flags */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "locklib/locklib.h"
#include "storage/storage.h"

#include "base/config.h"

enum opt_kind { OPT_STRING, OPT_SIZE, OPT_INT, OPT_DURATION, OPT_LOG_FORMAT, OPT_FLAG };

typedef struct gw_option {
    const char *flag;     /* "--listen" */
    const char *env;      /* "FENCEGATE_LISTEN", NULL for action flags */
    const char *metavar;
    const char *help;
    enum opt_kind kind;
    long long min;
    long long max;
} gw_option;

static const gw_option options[] = {
    {"--listen", "FENCEGATE_LISTEN", "HOST:PORT",
     "address to serve HTTP on (default 127.0.0.1:8080; [::1]:8080 for IPv6)", OPT_STRING, 0,
     0},
    {"--redis", "FENCEGATE_REDIS", "URL",
     "Redis URL: redis://[:password@]host[:port][/db], unix:///path, or "
     "redis-sentinel://[:password@]host:port[,host:port...]/MASTERNAME, "
     "redis-cluster://[:password@]host:port[,host:port...] or "
     "redlock://[:password@]host:port,host:port,host:port[,...] (an odd number, 3 to 15, "
     "of independent masters) (default redis://127.0.0.1:6379)",
     OPT_STRING, 0, 0},
    {"--redis-min-replicas", "FENCEGATE_REDIS_MIN_REPLICAS", "N",
     "after each acquisition, WAIT up to 1 s for N replicas to acknowledge it, else undo it "
     "and answer 503 (default 0: off); narrows the window in which a failover loses a lock",
     OPT_INT, 0, 64},
    {"--data", "FENCEGATE_DATA", "DIR", "storage directory, created if missing (default ./data)",
     OPT_STRING, 0, 0},
    {"--store", "FENCEGATE_STORE", "URL",
     "the store and token ledger: lmdb:[DIR] (default: LMDB in --data), or a PostgreSQL "
     "URI postgres[ql]://[user[:pw]@]host[:port]/db[?host=/socket/dir] shared by any "
     "number of gateways",
     OPT_STRING, 0, 0},
    {"--auth-token-file", "FENCEGATE_AUTH_TOKEN_FILE", "FILE",
     "require 'Authorization: Bearer <token>' on every endpoint but /healthz and /livez; the "
     "token is the whole file less the white space around it, 1 to 511 printable ASCII bytes "
     "(a second line is refused), read as fencectl reads it",
     OPT_STRING, 0, 0},
    {"--clients", "FENCEGATE_CLIENTS", "FILE",
     "clients and their scopes (JSON: name, token_sha256, allow: [{prefix, ops}]); every "
     "endpoint but /healthz then needs one of their tokens, and a client may do only what "
     "its scopes allow; re-read on SIGHUP (a bad file is refused and the old one stays)",
     OPT_STRING, 0, 0},
    {"--tls-cert", "FENCEGATE_TLS_CERT", "FILE",
     "serve HTTPS only (TLS 1.2 or later) with this PEM certificate (chain); needs --tls-key",
     OPT_STRING, 0, 0},
    {"--tls-key", "FENCEGATE_TLS_KEY", "FILE", "the PEM private key of --tls-cert", OPT_STRING,
     0, 0},
    {"--tls-client-ca", "FENCEGATE_TLS_CLIENT_CA", "FILE",
     "mutual TLS: every request but /healthz needs a client certificate signed by a CA in "
     "this PEM file (else 401); a certificate's subject CN may name a --clients client",
     OPT_STRING, 0, 0},
    {"--max-value-bytes", "FENCEGATE_MAX_VALUE_BYTES", "N",
     "largest resource value a PUT may store (default 1048576)", OPT_SIZE, 1, 268435456},
    {"--map-size", "FENCEGATE_MAP_SIZE", "BYTES",
     "LMDB map size of the storage: the most it can ever hold; writes beyond answer 507 "
     "(default 1073741824, 1 GiB)",
     OPT_SIZE, 1048576, 17592186044416LL},
    {"--threads", "FENCEGATE_THREADS", "N",
     "HTTP event loop threads (default: one per online CPU, at least 2)",
     OPT_INT, 1, 1024},
    {"--max-connections", "FENCEGATE_MAX_CONNECTIONS", "N",
     "concurrent HTTP connections (default 1024; lowered, with a warning, to what the "
     "open-file limit holds)",
     OPT_INT, 1, 1000000},
    {"--max-waiters", "FENCEGATE_MAX_WAITERS", "N",
     "parked /lock waiters (wait_ms) at once; more answer 503 too_many_waiters, keeping "
     "connections for /healthz and /unlock (default 3/4 of --max-connections)",
     OPT_INT, 1, 1000000},
    {"--max-connections-per-address", "FENCEGATE_MAX_CONNECTIONS_PER_ADDRESS", "N",
     "connections from one client address at once; more are closed at accept, so one client "
     "cannot take every connection (default 1/2 of --max-connections; 0: no limit, e.g. "
     "behind a reverse proxy)",
     OPT_INT, 0, 1000000},
    {"--token-key-idle-ttl", "FENCEGATE_TOKEN_KEY_IDLE_TTL", "DURATION",
     "expire a resource's token keys in Redis after this long, or up to a 24th more, "
     "without a lock or renew (500ms, 30s, 2m, 12h, 7d or ms; 0: never; default 7d)",
     OPT_DURATION, 0, GW_TOKEN_KEY_IDLE_TTL_MAX_MS},
    {"--max-ttl", "FENCEGATE_MAX_TTL", "DURATION",
     "the largest ttl_ms a /lock or /renew may ask for (default 1h, the most); on "
     "redlock:// also how long a master that lost its data is held out, so every gateway "
     "on the same masters must use the same value or a larger one",
     OPT_DURATION, LK_LEASE_MIN_MS, LK_LEASE_MAX_MS},
    {"--log-format", "FENCEGATE_LOG_FORMAT", "text|json",
     "request log format on stderr (default text)", OPT_LOG_FORMAT, 0, 0},
    {"--check-config", NULL, NULL,
     "validate flags, environment and the open-file limit as start-up would, then exit "
     "without serving",
     OPT_FLAG, 0, 0},
    {"--routes", NULL, NULL, "print one line per served route (METHOD /path SCOPE WHERE: the operation a "
     "--clients client needs on it, and where its resource is: path, body or none) and exit",
     OPT_FLAG, 0, 0},
    {"--version", NULL, NULL, "print the version and exit", OPT_FLAG, 0, 0},
    {"--help", NULL, NULL, "print this help and exit", OPT_FLAG, 0, 0},
};
#define N_OPTIONS (sizeof options / sizeof options[0])

void gw__config_usage(FILE *f, const char *argv0)
{
    fprintf(f,
            "Usage: %s [FLAGS]\n"
            "fencegate %s: a fencing-token guarded resource gateway over Redis locks.\n\n"
            "Each flag can also be set with the environment variable shown; flags win.\n\n",
            argv0, FENCEGATE_VERSION);
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const gw_option *o = &options[i];
        char left[64];
        if (o->metavar != NULL) {
            snprintf(left, sizeof left, "%s %s", o->flag, o->metavar);
        } else {
            snprintf(left, sizeof left, "%s", o->flag);
        }
        fprintf(f, "  %-32s %s\n", left, o->help);
        if (o->env != NULL) {
            fprintf(f, "  %-32s env: %s\n", "", o->env);
        }
    }
}

static void set_defaults(gw_config *cfg)
{
    store_options sopts;

    memset(cfg, 0, sizeof *cfg);
    store_options_init(&sopts);
    cfg->map_size = sopts.map_size; /* the storage's own default, named once, there */
    snprintf(cfg->listen, sizeof cfg->listen, "127.0.0.1:8080");
    snprintf(cfg->redis_url, sizeof cfg->redis_url, "redis://127.0.0.1:6379");
    snprintf(cfg->data_dir, sizeof cfg->data_dir, "./data");
    cfg->max_value_bytes = 1048576;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cfg->threads = cpus > 2 ? (cpus < 1024 ? (int)cpus : 1024) : 2;
    cfg->max_connections = 1024;
    cfg->max_connections_per_address = -1; /* half of max_connections, once that is known */
    cfg->token_key_idle_ttl_ms = GW_TOKEN_KEY_IDLE_TTL_DEFAULT_MS;
    cfg->max_ttl_ms = LK_LEASE_MAX_MS;
}

/* Parses a decimal in [min, max] with nothing else around it. Returns 0 or -1. */
static int parse_number(const char *s, long long min, long long max, long long *out)
{
    char *end = NULL;

    if (s[0] < '0' || s[0] > '9') {
        return -1; /* no sign, no space, not empty */
    }
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max) {
        return -1;
    }
    *out = v;
    return 0;
}

/* Parses a duration in [min, max] ms: decimal digits and an optional unit, ms (the default),
 * s, m, h or d ("30s", "2m", "7d", "1500"), as fencectl takes them. Returns 0 or -1. */
static int parse_duration_ms(const char *s, long long min, long long max, long long *out)
{
    static const struct {
        const char *unit;
        long long ms;
    } units[] = {{"", 1}, {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000},
                 {"d", 86400000}};
    char digits[32];
    size_t n = strspn(s, "0123456789");
    long long v = 0;

    if (n == 0 || n >= sizeof digits) {
        return -1;
    }
    memcpy(digits, s, n);
    digits[n] = '\0';
    if (parse_number(digits, 0, max, &v) != 0) {
        return -1;
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(s + n, units[i].unit) == 0) {
            /* v <= max, so the division keeps the product from overflowing. */
            if (v > max / units[i].ms || v * units[i].ms < min) {
                return -1;
            }
            *out = v * units[i].ms;
            return 0;
        }
    }
    return -1;
}

static int copy_string(char *dst, size_t len, const char *value)
{
    size_t n = strlen(value);
    if (n == 0 || n >= len) {
        return -1;
    }
    memcpy(dst, value, n + 1);
    return 0;
}

/* Stores value into the field for option o. `origin` names the flag or variable for the
 * message. Returns 0 or -1 with err. */
static int apply(gw_config *cfg, const gw_option *o, const char *value, const char *origin,
                 char *err, size_t errlen)
{
    long long v = 0;
    int rc = 0;

    switch (o->kind) {
    case OPT_STRING:
        if (strcmp(o->flag, "--listen") == 0) {
            rc = copy_string(cfg->listen, sizeof cfg->listen, value);
        } else if (strcmp(o->flag, "--redis") == 0) {
            rc = copy_string(cfg->redis_url, sizeof cfg->redis_url, value);
        } else if (strcmp(o->flag, "--data") == 0) {
            rc = copy_string(cfg->data_dir, sizeof cfg->data_dir, value);
        } else if (strcmp(o->flag, "--store") == 0) {
            rc = copy_string(cfg->store_url, sizeof cfg->store_url, value);
        } else if (strcmp(o->flag, "--clients") == 0) {
            rc = copy_string(cfg->clients_file, sizeof cfg->clients_file, value);
        } else if (strcmp(o->flag, "--tls-cert") == 0) {
            rc = copy_string(cfg->tls_cert, sizeof cfg->tls_cert, value);
        } else if (strcmp(o->flag, "--tls-key") == 0) {
            rc = copy_string(cfg->tls_key, sizeof cfg->tls_key, value);
        } else if (strcmp(o->flag, "--tls-client-ca") == 0) {
            rc = copy_string(cfg->tls_client_ca, sizeof cfg->tls_client_ca, value);
        } else {
            rc = copy_string(cfg->auth_token_file, sizeof cfg->auth_token_file, value);
        }
        if (rc != 0) {
            snprintf(err, errlen, "%s: the value must be 1 to 1000 bytes", origin);
        }
        return rc;
    case OPT_SIZE:
    case OPT_INT:
        if (parse_number(value, o->min, o->max, &v) != 0) {
            snprintf(err, errlen, "%s: '%.64s' is not a whole number from %lld to %lld", origin,
                     value, o->min, o->max);
            return -1;
        }
        if (strcmp(o->flag, "--max-value-bytes") == 0) {
            cfg->max_value_bytes = (size_t)v;
        } else if (strcmp(o->flag, "--map-size") == 0) {
            cfg->map_size = (size_t)v;
        } else if (strcmp(o->flag, "--threads") == 0) {
            cfg->threads = (int)v;
        } else if (strcmp(o->flag, "--max-waiters") == 0) {
            cfg->max_waiters = (int)v;
        } else if (strcmp(o->flag, "--max-connections-per-address") == 0) {
            cfg->max_connections_per_address = (int)v;
        } else if (strcmp(o->flag, "--redis-min-replicas") == 0) {
            cfg->redis_min_replicas = (int)v;
        } else {
            cfg->max_connections = (int)v;
        }
        return 0;
    case OPT_DURATION:
        if (parse_duration_ms(value, o->min, o->max, &v) != 0) {
            snprintf(err, errlen,
                     "%s: '%.64s' is not a duration from %lld to %lld ms (such as 30s, 2m, 7d)",
                     origin, value, o->min, o->max);
            return -1;
        }
        if (strcmp(o->flag, "--max-ttl") == 0) {
            cfg->max_ttl_ms = v;
        } else {
            cfg->token_key_idle_ttl_ms = v;
        }
        return 0;
    case OPT_LOG_FORMAT:
        if (strcmp(value, "text") == 0 || strcmp(value, "json") == 0) {
            cfg->log_json = strcmp(value, "json") == 0;
            return 0;
        }
        snprintf(err, errlen, "%s: '%.64s' is not one of text, json", origin, value);
        return -1;
    case OPT_FLAG:
        break;
    }
    return 0;
}

static const gw_option *find_flag(const char *arg, size_t len)
{
    for (size_t i = 0; i < N_OPTIONS; i++) {
        if (strlen(options[i].flag) == len && strncmp(options[i].flag, arg, len) == 0) {
            return &options[i];
        }
    }
    return NULL;
}

static void set_action(gw_config *cfg, const gw_option *o)
{
    if (strcmp(o->flag, "--help") == 0) {
        cfg->help = 1;
    } else if (strcmp(o->flag, "--version") == 0) {
        cfg->version = 1;
    } else if (strcmp(o->flag, "--routes") == 0) {
        cfg->routes = 1;
    } else {
        cfg->check_config = 1;
    }
}

/* Applies the environment variable of every option that no flag sets. */
static int parse_env(gw_config *cfg, const int *given, char *err, size_t errlen)
{
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const gw_option *o = &options[i];
        const char *value = o->env != NULL && !given[i] ? getenv(o->env) : NULL;
        /* An empty variable counts as unset, as shells make that easy to produce. */
        if (value != NULL && value[0] != '\0' && apply(cfg, o, value, o->env, err, errlen) != 0) {
            return -1;
        }
    }
    return 0;
}

/* Splits argv[*i] into its option and value ("--flag value" or "--flag=value"), advancing
 * *i past a separate value. Returns the option, or NULL with err. */
static const gw_option *next_flag(int argc, char **argv, int *i, const char **value, char *err,
                                  size_t errlen)
{
    const char *arg = argv[*i];
    const char *eq = strchr(arg, '=');
    size_t name_len = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
    const gw_option *o = find_flag(arg, name_len);

    *value = NULL;
    if (o == NULL) {
        snprintf(err, errlen, "unknown flag '%.*s' (see --help)",
                 (int)(name_len > 64 ? 64 : name_len), arg);
        return NULL;
    }
    if (o->kind == OPT_FLAG) {
        if (eq != NULL) {
            snprintf(err, errlen, "%s takes no value", o->flag);
            return NULL;
        }
        return o;
    }
    if (eq != NULL) {
        *value = eq + 1;
    } else if (*i + 1 < argc) {
        *value = argv[++*i];
    } else {
        snprintf(err, errlen, "%s needs a value (%s)", o->flag, o->metavar);
        return NULL;
    }
    return o;
}

static int parse_config(gw_config *cfg, int argc, char **argv, char *err, size_t errlen)
{
    int given[N_OPTIONS] = {0};
    const char *value = NULL;

    set_defaults(cfg);
    /* Pass 1 finds the flags, so a bad variable that a flag overrides is never looked at. */
    for (int i = 1; i < argc; i++) {
        const gw_option *o = next_flag(argc, argv, &i, &value, err, errlen);
        if (o == NULL) {
            return -1;
        }
        given[o - options] = 1;
    }
    if (parse_env(cfg, given, err, errlen) != 0) {
        return -1;
    }
    for (int i = 1; i < argc; i++) {
        const gw_option *o = next_flag(argc, argv, &i, &value, err, errlen);
        if (o->kind == OPT_FLAG) {
            set_action(cfg, o);
        } else if (apply(cfg, o, value, o->flag, err, errlen) != 0) {
            return -1;
        }
    }
    return 0;
}

/* The limits not given, from --max-connections. */
static void derive_limits(gw_config *cfg)
{
    int n = cfg->max_connections;
    if (cfg->waiters_derived) {
        /* A quarter of the connections stays for requests that are not waiting. */
        cfg->max_waiters = n - n / 4;
    }
    if (cfg->per_address_derived) {
        /* Half stays for the other clients however many one address opens; at least 1, as
         * 0 would mean no limit. */
        cfg->max_connections_per_address = n / 2 > 0 ? n / 2 : 1;
    }
}

void gw__config_fit_connections(gw_config *cfg, int fit)
{
    cfg->max_connections = fit;
    derive_limits(cfg);
    if (cfg->max_waiters >= fit) {
        cfg->max_waiters = fit - 1; /* given above the new limit, or derived from under 4 */
    }
    if (cfg->max_connections_per_address > fit) {
        cfg->max_connections_per_address = fit; /* the same as no more than fit */
    }
}

int gw__config_parse(gw_config *cfg, int argc, char **argv, char *err, size_t errlen)
{
    if (errlen > 0) {
        err[0] = '\0';
    }
    int rc = parse_config(cfg, argc, argv, err, errlen);
    if (rc == 0) {
        cfg->waiters_derived = cfg->max_waiters == 0;
        cfg->per_address_derived = cfg->max_connections_per_address < 0;
        derive_limits(cfg);
    }
    if (rc == 0 && (cfg->tls_cert[0] != '\0') != (cfg->tls_key[0] != '\0')) {
        snprintf(err, errlen, "--tls-cert and --tls-key go together: %s was given alone",
                 cfg->tls_cert[0] != '\0' ? "--tls-cert" : "--tls-key");
        rc = -1;
    }
    if (rc == 0 && cfg->tls_client_ca[0] != '\0' && cfg->tls_cert[0] == '\0') {
        snprintf(err, errlen, "--tls-client-ca needs --tls-cert and --tls-key (mutual TLS "
                              "is TLS)");
        rc = -1;
    }
    if (rc == 0 && cfg->clients_file[0] != '\0' && cfg->auth_token_file[0] != '\0') {
        snprintf(err, errlen, "--clients and --auth-token-file are exclusive: give the "
                              "token's client a line in the clients file");
        rc = -1;
    }
    if (rc == 0 && cfg->max_waiters >= cfg->max_connections) {
        /* Waiters hold their connections: as many as --max-connections would leave none for
         * /healthz or for the holder's /unlock that the waiters wait for. */
        snprintf(err, errlen, "--max-waiters %d must be below --max-connections %d",
                 cfg->max_waiters, cfg->max_connections);
        rc = -1;
    }
    /* Messages quote what was given ("unknown flag '...'"). A newline or an escape sequence
     * in an argument or variable must not break the one-line message or reach the
     * terminal: keep it printable ASCII. */
    for (char *p = err; errlen > 0 && *p != '\0'; p++) {
        if (*p < 0x20 || *p > 0x7e) {
            *p = '?';
        }
    }
    return rc;
}

int gw__config_listen_addr(const char *listen, struct sockaddr_storage *addr, char *err,
                           size_t errlen)
{
    char host[256];
    const char *colon = strrchr(listen, ':');
    struct addrinfo hints;
    struct addrinfo *res = NULL;
    long long port = 0;

    if (colon == NULL || parse_number(colon + 1, 1, 65535, &port) != 0 || colon == listen) {
        snprintf(err, errlen, "--listen: '%.200s' is not HOST:PORT with a port from 1 to 65535",
                 listen);
        return -1;
    }
    size_t hlen = (size_t)(colon - listen);
    const char *h = listen;
    if (h[0] == '[' && hlen >= 2 && h[hlen - 1] == ']') {
        h++; /* [::1]:8080 */
        hlen -= 2;
    }
    if (hlen == 0 || hlen >= sizeof host) {
        snprintf(err, errlen, "--listen: '%.200s' has no host", listen);
        return -1;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int rc = getaddrinfo(host, colon + 1, &hints, &res);
    if (rc != 0 || res == NULL) {
        snprintf(err, errlen, "--listen: cannot resolve '%s': %s", host, gai_strerror(rc));
        return -1;
    }
    memset(addr, 0, sizeof *addr);
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

void gw__config_redact_url(const char *url, char *out, size_t outlen)
{
    const char *scheme_end = strstr(url, "://");
    const char *at = NULL;

    if (scheme_end != NULL) {
        const char *host = scheme_end + 3;
        const char *slash = strchr(host, '/');
        at = strchr(host, '@');
        if (at != NULL && slash != NULL && at > slash) {
            at = NULL;
        }
    }
    if (at == NULL) {
        snprintf(out, outlen, "%s", url);
        return;
    }
    /* The password never reaches a log. */
    snprintf(out, outlen, "%.*s***@%s", (int)(scheme_end + 3 - url), url, at + 1);
}

size_t gw__config_txn_body_max(const gw_config *cfg)
{
    size_t b64 = (cfg->max_value_bytes + 2) / 3 * 4;
    size_t per = b64 + GW_TXN_WRITE_FIELDS;
    if (per > GW_TXN_BODY_CAP / GW_TXN_WRITES_MAX) {
        return GW_TXN_BODY_CAP;
    }
    return per * GW_TXN_WRITES_MAX;
}
