/*
 * fencectl's command line: which subcommand, which flags, which durations. No I/O here, so
 * the parser can be fuzzed on its own (see fc_args.h).
 *
 * Grammar:  fencectl [GLOBAL...] SUBCOMMAND [FLAGS...] RESOURCE [FLAGS...] [--] [COMMAND...]
 * Flags take their value as "--ttl 30s" or "--ttl=30s". Global flags (--url,
 * --auth-token-file, --verbose, --help, --version) may appear before or after the
 * subcommand. For lock, "--" or the first operand after RESOURCE starts COMMAND, and
 * everything from there on belongs to COMMAND.
 */
#include "fc_args.h"

#include <stdio.h>
#include <string.h>

#define DURATION_MAX_MS (24LL * 3600 * 1000)

/* What a flag sets. */
typedef enum flag_kind {
    F_HELP,
    F_VERSION,
    F_VERBOSE,
    F_URL,
    F_AUTH,
    F_CACERT,
    F_CERT,
    F_KEY,
    F_TTL,
    F_WAIT,
    F_KILL_GRACE,
    F_CONFLICT,
    F_OWNER,
    F_TOKEN,
    F_CONTENT_TYPE,
    F_ALLOW_EMPTY,
    F_FORCE,
    F_REASON
} flag_kind;

#define ON(cmd) (1u << (cmd))
#define ALL_COMMANDS 0xffffu

typedef struct flag_def {
    const char *name;
    flag_kind kind;
    int takes_value;
    unsigned commands; /* bit set of fc_command where the flag is allowed */
} flag_def;

static const flag_def flags[] = {
    {"--help", F_HELP, 0, ALL_COMMANDS},
    {"-h", F_HELP, 0, ALL_COMMANDS},
    {"--version", F_VERSION, 0, ALL_COMMANDS},
    {"--verbose", F_VERBOSE, 0, ALL_COMMANDS},
    {"-v", F_VERBOSE, 0, ALL_COMMANDS},
    {"--url", F_URL, 1, ALL_COMMANDS},
    {"--auth-token-file", F_AUTH, 1, ALL_COMMANDS},
    {"--cacert", F_CACERT, 1, ALL_COMMANDS},
    {"--cert", F_CERT, 1, ALL_COMMANDS},
    {"--key", F_KEY, 1, ALL_COMMANDS},
    {"--ttl", F_TTL, 1, ON(FC_CMD_LOCK) | ON(FC_CMD_RENEW)},
    {"--wait", F_WAIT, 1, ON(FC_CMD_LOCK)},
    {"--kill-grace", F_KILL_GRACE, 1, ON(FC_CMD_LOCK)},
    {"--conflict-exit-code", F_CONFLICT, 1, ON(FC_CMD_LOCK)},
    {"--owner", F_OWNER, 1, ON(FC_CMD_UNLOCK) | ON(FC_CMD_RENEW)},
    {"--token", F_TOKEN, 1, ON(FC_CMD_WRITE)},
    {"--content-type", F_CONTENT_TYPE, 1, ON(FC_CMD_WRITE)},
    {"--allow-empty", F_ALLOW_EMPTY, 0, ON(FC_CMD_WRITE)},
    {"--force", F_FORCE, 0, ON(FC_CMD_RELEASE)},
    {"--reason", F_REASON, 1, ON(FC_CMD_RELEASE)},
};

static const char *const command_names[] = {
    [FC_CMD_NONE] = "",          [FC_CMD_LOCK] = "lock", [FC_CMD_UNLOCK] = "unlock",
    [FC_CMD_RENEW] = "renew",    [FC_CMD_WRITE] = "write", [FC_CMD_READ] = "read",
    [FC_CMD_STATUS] = "status",  [FC_CMD_LS] = "ls",     [FC_CMD_RELEASE] = "release",
};

#define COMMAND_LIST "lock, unlock, renew, write, read, status, ls or release"

const char *fc__command_name(fc_command cmd)
{
    return command_names[cmd];
}

int fc__parse_duration(const char *text, int64_t *ms)
{
    int64_t value = 0;
    const char *p = text;

    if (*p < '0' || *p > '9') {
        return -1; /* empty, a sign, or no digits */
    }
    while (*p >= '0' && *p <= '9') {
        /* Stop well before overflow: anything over a day is refused below anyway. */
        if (value > DURATION_MAX_MS) {
            return -1;
        }
        value = value * 10 + (*p - '0');
        p++;
    }
    int64_t scale = 0;
    if (strcmp(p, "ms") == 0) {
        scale = 1;
    } else if (strcmp(p, "s") == 0) {
        scale = 1000;
    } else if (strcmp(p, "m") == 0) {
        scale = 60000;
    } else {
        return -1;
    }
    if (value > DURATION_MAX_MS / scale) {
        return -1;
    }
    *ms = value * scale;
    return 0;
}

/* A decimal integer in [min, max] with nothing after it. Returns 0 or -1. */
static int parse_int(const char *text, int64_t min, int64_t max, int64_t *out)
{
    int64_t value = 0;
    const char *p = text;

    if (*p < '0' || *p > '9') {
        return -1;
    }
    for (; *p >= '0' && *p <= '9'; p++) {
        if (value > (max - (*p - '0')) / 10) {
            return -1;
        }
        value = value * 10 + (*p - '0');
    }
    if (*p != '\0' || value < min) {
        return -1;
    }
    *out = value;
    return 0;
}

static int parse_duration_in(const char *flag, const char *text, int64_t min, int64_t max,
                             int64_t *out, char *err, size_t errlen)
{
    int64_t ms = 0;

    if (fc__parse_duration(text, &ms) != 0) {
        snprintf(err, errlen, "%s: '%.40s' is not a duration (use a number with ms, s or m, "
                 "like 500ms, 30s or 2m)", flag, text);
        return -1;
    }
    if (ms < min || ms > max) {
        snprintf(err, errlen, "%s must be from %lldms to %lldms", flag, (long long)min,
                 (long long)max);
        return -1;
    }
    *out = ms;
    return 0;
}

/* Stores one flag's value. Returns 0 or -1 with err. */
static int apply_value(const flag_def *f, const char *value, fc_options *o, char *err,
                       size_t errlen)
{
    int64_t n = 0;

    switch (f->kind) {
    case F_URL: o->url = value; return 0;
    case F_AUTH: o->auth_token_file = value; return 0;
    case F_CACERT: o->cacert = value; return 0;
    case F_CERT: o->cert = value; return 0;
    case F_KEY: o->key = value; return 0;
    case F_CONTENT_TYPE: o->content_type = value; return 0;
    case F_REASON:
        if (value[0] == '\0' || strlen(value) > 500) {
            snprintf(err, errlen, "%s must be 1 to 500 bytes saying why", f->name);
            return -1;
        }
        o->reason = value;
        return 0;
    case F_TTL:
        return parse_duration_in(f->name, value, FC_TTL_MIN_MS, FC_TTL_MAX_MS, &o->ttl_ms, err,
                                 errlen);
    case F_WAIT:
        return parse_duration_in(f->name, value, 0, FC_WAIT_MAX_MS, &o->wait_ms, err, errlen);
    case F_KILL_GRACE:
        return parse_duration_in(f->name, value, 0, DURATION_MAX_MS, &o->kill_grace_ms, err,
                                 errlen);
    case F_CONFLICT:
        if (parse_int(value, 0, 255, &n) != 0) {
            snprintf(err, errlen, "%s must be an integer from 0 to 255", f->name);
            return -1;
        }
        o->conflict_exit_code = (int)n;
        return 0;
    case F_TOKEN:
        if (parse_int(value, 1, FG_TOKEN_MAX, &o->token) != 0) {
            snprintf(err, errlen, "%s must be a positive integer below 2^53", f->name);
            return -1;
        }
        return 0;
    case F_OWNER:
        /* The value is a capability: never echo it. */
        if (!fg_valid_name(value, FG_OWNER_MAX)) {
            snprintf(err, errlen, "%s must be 1 to %d characters of " FG_NAME_CHARS, f->name,
                     FG_OWNER_MAX);
            return -1;
        }
        o->owner = value;
        return 0;
    default: return 0;
    }
}

static const flag_def *find_flag(const char *arg, size_t name_len)
{
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        if (strlen(flags[i].name) == name_len && strncmp(flags[i].name, arg, name_len) == 0) {
            return &flags[i];
        }
    }
    return NULL;
}

/* Handles the flag at argv[*i], advancing *i past its value. Returns 0 or -1 with err. */
static int parse_flag(int argc, char *const *argv, int *i, fc_options *o, char *err,
                      size_t errlen)
{
    const char *arg = argv[*i];
    const char *eq = strchr(arg, '=');
    size_t name_len = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
    const flag_def *f = find_flag(arg, name_len);

    if (f == NULL) {
        snprintf(err, errlen, "unknown option '%.*s'", (int)(name_len > 60 ? 60 : name_len),
                 arg);
        return -1;
    }
    if ((f->commands & ON(o->cmd)) == 0) {
        snprintf(err, errlen, "%s is not an option of %s", f->name,
                 o->cmd == FC_CMD_NONE ? "fencectl without a command" : fc__command_name(o->cmd));
        return -1;
    }
    if (!f->takes_value) {
        if (eq != NULL) {
            snprintf(err, errlen, "%s takes no value", f->name);
            return -1;
        }
        o->help |= f->kind == F_HELP;
        o->version |= f->kind == F_VERSION;
        o->verbose |= f->kind == F_VERBOSE;
        o->allow_empty |= f->kind == F_ALLOW_EMPTY;
        o->force |= f->kind == F_FORCE;
        return 0;
    }
    const char *value = eq != NULL ? eq + 1 : NULL;
    if (value == NULL) {
        if (*i + 1 >= argc) {
            snprintf(err, errlen, "%s needs a value", f->name);
            return -1;
        }
        *i += 1;
        value = argv[*i];
    }
    return apply_value(f, value, o, err, errlen);
}

static fc_command find_command(const char *name)
{
    for (int c = FC_CMD_LOCK; c <= FC_CMD_RELEASE; c++) {
        if (strcmp(command_names[c], name) == 0) {
            return (fc_command)c;
        }
    }
    return FC_CMD_NONE;
}

/* Handles an operand: the subcommand, then RESOURCE, then (lock) the start of COMMAND.
 * Returns 1 when COMMAND started (stop parsing), 0 to go on, -1 with err. */
static int parse_operand(char *const *argv, int i, fc_options *o, char *err, size_t errlen)
{
    const char *arg = argv[i];

    if (o->cmd == FC_CMD_NONE) {
        o->cmd = find_command(arg);
        if (o->cmd == FC_CMD_NONE) {
            snprintf(err, errlen, "unknown command '%.40s' (use " COMMAND_LIST ")", arg);
            return -1;
        }
        return 0;
    }
    if (o->cmd == FC_CMD_LS && o->prefix == NULL) {
        if (!fg_valid_name(arg, FG_RESOURCE_MAX)) {
            snprintf(err, errlen, "prefix '%.40s' must be 1 to %d characters of " FG_NAME_CHARS,
                     arg, FG_RESOURCE_MAX);
            return -1;
        }
        o->prefix = arg;
        return 0;
    }
    int more = o->cmd == FC_CMD_LOCK && o->dashdash && o->resource != NULL;
    if ((o->resource == NULL && o->cmd != FC_CMD_LS) || more) {
        if (!fg_valid_name(arg, FG_RESOURCE_MAX)) {
            snprintf(err, errlen, "resource '%.40s' must be 1 to %d characters of " FG_NAME_CHARS,
                     arg, FG_RESOURCE_MAX);
            return -1;
        }
        if (o->nresources >= FC_SET_MAX) {
            snprintf(err, errlen, "lock takes at most %d resources", FC_SET_MAX);
            return -1;
        }
        if (o->resource == NULL) {
            o->resource = arg;
        }
        o->resources[o->nresources++] = arg;
        return 0;
    }
    if (o->cmd == FC_CMD_LOCK) {
        o->command = argv + i;
        return 1;
    }
    snprintf(err, errlen, "unexpected argument '%.40s'", arg);
    return -1;
}

void fc__env_name(const char *resource, char *out)
{
    int n = snprintf(out, FC_ENV_NAME_MAX, "FENCING_TOKEN_");
    for (const char *p = resource; *p != '\0' && n < FC_ENV_NAME_MAX - 1; p++) {
        char ch = *p;
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                 (ch >= '0' && ch <= '9') || ch == '_';
        out[n++] = ok ? ch : '_';
    }
    out[n] = '\0';
}

/* A set of resources: distinct names whose variables (fc__env_name) are distinct too, or
 * COMMAND could not tell two tokens apart. */
static int check_set(const fc_options *o, char *err, size_t errlen)
{
    char a[FC_ENV_NAME_MAX], b[FC_ENV_NAME_MAX];

    for (int i = 1; i < o->nresources; i++) {
        fc__env_name(o->resources[i], a);
        for (int j = 0; j < i; j++) {
            if (strcmp(o->resources[i], o->resources[j]) == 0) {
                snprintf(err, errlen, "resource '%.40s' is named twice", o->resources[i]);
                return -1;
            }
            fc__env_name(o->resources[j], b);
            if (strcmp(a, b) == 0) {
                snprintf(err, errlen, "resources '%.40s' and '%.40s' would both set %.80s "
                         "(every byte outside [A-Za-z0-9_] becomes '_'): rename one, or lock "
                         "them in two commands",
                         o->resources[j], o->resources[i], a);
                return -1;
            }
        }
    }
    return 0;
}

/* The checks for required arguments once the whole line was read. */
static int check_required(const fc_options *o, char *err, size_t errlen)
{
    const char *name = fc__command_name(o->cmd);

    if (o->cmd == FC_CMD_NONE) {
        snprintf(err, errlen, "missing command (" COMMAND_LIST "); see fencectl --help");
        return -1;
    }
    if (o->cmd == FC_CMD_LS) {
        return 0;
    }
    if (o->resource == NULL) {
        snprintf(err, errlen, "%s needs a RESOURCE; see fencectl %s --help", name, name);
        return -1;
    }
    if (o->cmd == FC_CMD_LOCK && (o->command == NULL || o->command[0] == NULL)) {
        snprintf(err, errlen, "lock needs a COMMAND to run: fencectl lock %s -- COMMAND", 
                 o->resource);
        return -1;
    }
    if (o->cmd == FC_CMD_LOCK && check_set(o, err, errlen) != 0) {
        return -1;
    }
    if ((o->cmd == FC_CMD_UNLOCK || o->cmd == FC_CMD_RENEW) && o->owner == NULL) {
        snprintf(err, errlen, "%s needs --owner OWNER (the owner the lock was taken with)",
                 name);
        return -1;
    }
    if (o->cmd == FC_CMD_RELEASE && !o->force) {
        snprintf(err, errlen, "release frees the lock whoever holds it and fences the holder: "
                 "say so with --force (to release your own hold, use unlock)");
        return -1;
    }
    if (o->cmd == FC_CMD_RELEASE && o->reason == NULL) {
        snprintf(err, errlen, "release needs --reason TEXT (it is logged)");
        return -1;
    }
    if (o->cmd == FC_CMD_WRITE && o->token == 0) {
        snprintf(err, errlen, "write needs --token N (the fencing token of your lock)");
        return -1;
    }
    return 0;
}

static int parse_args(int argc, char *const *argv, fc_options *o, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    o->ttl_ms = FC_DEFAULT_TTL_MS;
    o->kill_grace_ms = FC_DEFAULT_KILL_GRACE_MS;
    o->conflict_exit_code = FC_EXIT_CONFLICT;
    err[0] = '\0';
    for (int i = 1; i < argc; i++) {
        o->dashdash |= strcmp(argv[i], "--") == 0;
    }

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        int rc = 0;
        if (strcmp(arg, "--") == 0) {
            if (o->cmd != FC_CMD_LOCK || o->resource == NULL) {
                snprintf(err, errlen, "'--' only comes after 'lock RESOURCE', before COMMAND");
                return -1;
            }
            o->command = argv + i + 1;
            break;
        }
        if (arg[0] == '-' && arg[1] != '\0') {
            rc = parse_flag(argc, argv, &i, o, err, errlen);
        } else {
            rc = parse_operand(argv, i, o, err, errlen);
        }
        if (rc < 0) {
            return -1;
        }
        if (rc == 1) {
            break;
        }
    }
    if (o->help || o->version) {
        return 0;
    }
    return check_required(o, err, errlen);
}

int fc__parse_args(int argc, char *const *argv, fc_options *o, char *err, size_t errlen)
{
    int rc = parse_args(argc, argv, o, err, errlen);
    /* Messages quote what was typed ("unknown option '...'"). A newline or an escape
     * sequence in an argument must not break the one-line message or reach the terminal:
     * keep it printable ASCII. */
    for (char *p = err; *p != '\0'; p++) {
        if (*p < 0x20 || *p > 0x7e) {
            *p = '?';
        }
    }
    return rc;
}
