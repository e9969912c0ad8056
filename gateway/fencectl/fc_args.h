/*
 * fencectl's command line: subcommands, flags and durations. Pure parsing with no I/O, no
 * environment and no libcurl, so a fuzz target or a unit test can link fc_args.c alone.
 * Never installed.
 */
#ifndef FC_ARGS_H
#define FC_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include <fencegate/limits.h>

/* Exit codes, also listed in the --help text (fc__help). */
#define FC_EXIT_OK 0
#define FC_EXIT_CONFLICT 1     /* 409: locked (see --conflict-exit-code), not_owner, stale */
#define FC_EXIT_USAGE 2        /* bad flags, unreadable --auth-token-file, stdin errors,
                                * write: empty stdin without --allow-empty */
#define FC_EXIT_LOCK_LOST 3    /* lock: the lock was lost while COMMAND ran */
#define FC_EXIT_REFUSED 4      /* any other 4xx: invalid, unauthorized, unknown token, 404 */
#define FC_EXIT_UNAVAILABLE 5  /* no answer, a timeout, 503 or another 5xx after retries */
#define FC_EXIT_INTERNAL 125   /* lock: fencectl itself failed (fork, pipe, memory) */
#define FC_EXIT_CANNOT_RUN 126 /* lock: COMMAND exists but could not be executed */
#define FC_EXIT_NOT_FOUND 127  /* lock: COMMAND was not found */

#define FC_DEFAULT_URL "http://127.0.0.1:8080"
#define FC_DEFAULT_TTL_MS 30000
#define FC_DEFAULT_KILL_GRACE_MS 10000
#define FC_TTL_MIN_MS 100        /* the gateway's range for ttl_ms */
#define FC_TTL_MAX_MS 3600000
#define FC_WAIT_MAX_MS 3600000   /* longer than the gateway's 60 s: fencectl waits in slices */

typedef enum fc_command {
    FC_CMD_NONE = 0,
    FC_CMD_LOCK,
    FC_CMD_UNLOCK,
    FC_CMD_RENEW,
    FC_CMD_WRITE,
    FC_CMD_READ,
    FC_CMD_STATUS,
    FC_CMD_LS,
    FC_CMD_RELEASE
} fc_command;

#define FC_SET_MAX 64 /* most resources of one lock (the gateway's limit) */

/* Everything the command line said. Strings point into argv; nothing is allocated. */
typedef struct fc_options {
    fc_command cmd;
    int help;                 /* --help: print the help of cmd (or the overview) */
    int version;              /* --version */
    int verbose;              /* --verbose: progress (and the token) on stderr */
    const char *url;          /* --url, NULL when not given */
    const char *auth_token_file; /* --auth-token-file, NULL when not given */
    const char *cacert;       /* --cacert: the CAs an https:// gateway is checked against */
    const char *cert, *key;   /* --cert, --key: a client certificate (mutual TLS) */
    const char *resource;
    /* lock: the whole set, resources[0] = resource. Operands between RESOURCE and "--" are
     * more resources of one multi-resource lock (without "--" the first one starts
     * COMMAND, as always). */
    const char *resources[FC_SET_MAX];
    int nresources;
    int dashdash;             /* the line has "--" after the subcommand */
    const char *owner;        /* unlock, renew */
    const char *content_type; /* write, NULL for the gateway's default */
    int64_t ttl_ms;           /* lock, renew */
    int64_t wait_ms;          /* lock */
    int64_t kill_grace_ms;    /* lock */
    int64_t token;            /* write */
    int allow_empty;          /* write: --allow-empty, store an empty stdin */
    int force;                /* release: --force, which it needs */
    const char *reason;       /* release: --reason TEXT */
    const char *prefix;       /* ls: PREFIX, NULL for every lock */
    int conflict_exit_code;   /* lock */
    char *const *command;     /* lock: COMMAND and its ARGS, NULL-terminated (inside argv) */
} fc_options;

/* Parses a duration: a decimal integer followed by "ms", "s" or "m" ("500ms", "30s",
 * "2m"). Stores milliseconds in *ms. Returns 0, or -1 (and leaves *ms alone) when the text
 * is empty, has no unit or another one, is negative, or exceeds a day. */
int fc__parse_duration(const char *text, int64_t *ms);


/* Parses argv (argv[0] is the program) into *o, filling defaults first. argv must outlive
 * *o. Returns 0, or -1 with a one-line reason (no "fencectl:" prefix, no newline) in err
 * (errlen bytes). A successful parse with o->help or o->version set skips the checks for
 * required arguments. */
int fc__parse_args(int argc, char *const *argv, fc_options *o, char *err, size_t errlen);

/* The variable a set's token of resource goes to: "FENCING_TOKEN_" and the name with every
 * byte outside [A-Za-z0-9_] replaced by '_' ("orders.eu-1" -> FENCING_TOKEN_orders_eu_1).
 * out holds at least FC_ENV_NAME_MAX bytes. */
#define FC_ENV_NAME_MAX 256
void fc__env_name(const char *resource, char *out);

/* The name of a subcommand as typed ("lock"), or "" for FC_CMD_NONE. */
const char *fc__command_name(fc_command cmd);

/* The --help text of cmd (FC_CMD_NONE: the overview). Static storage; never freed. */
const char *fc__help(fc_command cmd);

#endif
