/*
 * Fuzz target: duration and flag parsing of both command lines, fencectl's (fc__parse_args,
 * fc__parse_duration) and the gateway's (gw__config_parse), on the same argv.
 *
 * Invariants:
 *   - a duration is accepted exactly when it is digits then ms, s or m, at most one day, and
 *     its value in ms is the one written;
 *   - fencectl: a successful parse has a command, a valid RESOURCE (ls: none, and a valid
 *     PREFIX if any), every duration and number in its documented range, the flags its
 *     command needs, and every string pointing into argv; a failure has a reason, and a
 *     bad --owner is never echoed (it is a capability);
 *   - gateway: a successful parse has every field in its documented range and is the same
 *     when parsed again; a failure has a reason;
 *   - a reason is one line of printable ASCII, whatever bytes it quotes. Neither parser
 *     exits, prints or reads past its arguments.
 *
 * Input: the arguments after argv[0], separated by NUL bytes (at most 32).
 */
#include <string.h>

#include "fc_args.h"
#include "fuzz.h"
#include "base/config.h"

#define MAX_ARGS 32
#define DAY_MS (24LL * 3600 * 1000)

extern char **environ;

/* The gateway reads FENCEGATE_* variables: none may leak in from the environment the fuzzer
 * happens to run in, or the same input would parse differently elsewhere. */
static void clear_env(void)
{
    static int done = 0;
    char name[256];

    while (!done) {
        done = 1;
        for (char **e = environ; *e != NULL; e++) {
            const char *eq = strchr(*e, '=');
            if (strncmp(*e, "FENCEGATE_", 10) == 0 && eq != NULL &&
                (size_t)(eq - *e) < sizeof name) {
                memcpy(name, *e, (size_t)(eq - *e));
                name[eq - *e] = '\0';
                unsetenv(name);
                done = 0; /* environ changed under us: scan again */
                break;
            }
        }
    }
}

/* The duration oracle: 1 with *ms when text is [0-9]+(ms|s|m) and at most a day. */
static int oracle_duration(const char *text, int64_t *ms)
{
    size_t digits = strspn(text, "0123456789");
    const char *unit = text + digits;
    int64_t scale = strcmp(unit, "ms") == 0 ? 1
                    : strcmp(unit, "s") == 0 ? 1000
                    : strcmp(unit, "m") == 0 ? 60000
                                             : 0;
    int64_t value = 0;

    if (digits == 0 || scale == 0) {
        return 0;
    }
    for (size_t i = 0; i < digits; i++) {
        value = value * 10 + (text[i] - '0');
        if (value > DAY_MS) {
            return 0; /* leading zeros never get here; anything longer is over a day */
        }
    }
    if (value > DAY_MS / scale) {
        return 0;
    }
    *ms = value * scale;
    return 1;
}

/* 1 when s is printable ASCII: one line, no terminal control codes. */
static int printable(const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s < 0x20 || *s > 0x7e) {
            return 0;
        }
    }
    return 1;
}

/* 1 when p is NULL or points into one of the arguments. */
static int in_argv(const char *p, char **argv, int argc)
{
    if (p == NULL) {
        return 1;
    }
    for (int i = 0; i < argc; i++) {
        if (p >= argv[i] && p <= argv[i] + strlen(argv[i])) {
            return 1;
        }
    }
    return 0;
}

static void check_fencectl(int argc, char **argv)
{
    fc_options o;
    char *err = malloc(512);
    fuzz_check(err != NULL, "malloc");

    int rc = fc__parse_args(argc, argv, &o, err, 512);
    fuzz_check(rc == 0 || rc == -1, "fc__parse_args returns 0 or -1");
    fuzz_check(memchr(err, '\0', 512) != NULL, "err is NUL-terminated");
    if (rc != 0) {
        fuzz_check(err[0] != '\0' && printable(err), "a failure has one printable line");
        /* The owner's own error is fixed text: it never quotes the capability. */
        fuzz_check(strncmp(err, "--owner must", 12) != 0 ||
                       strcmp(err, "--owner must be 1 to 128 characters of [A-Za-z0-9._:-]") == 0,
                   "a bad --owner is never echoed");
        free(err);
        return;
    }
    fuzz_check(in_argv(o.url, argv, argc) && in_argv(o.auth_token_file, argv, argc) &&
                   in_argv(o.resource, argv, argc) && in_argv(o.owner, argv, argc) &&
                   in_argv(o.content_type, argv, argc),
               "strings point into argv");
    fuzz_check(o.ttl_ms >= FC_TTL_MIN_MS && o.ttl_ms <= FC_TTL_MAX_MS, "ttl in range");
    fuzz_check(o.wait_ms >= 0 && o.wait_ms <= FC_WAIT_MAX_MS, "wait in range");
    fuzz_check(o.kill_grace_ms >= 0 && o.kill_grace_ms <= DAY_MS, "kill grace in range");
    fuzz_check(o.conflict_exit_code >= 0 && o.conflict_exit_code <= 255, "exit code in range");
    fuzz_check(o.token >= 0 && o.token <= FG_TOKEN_MAX, "token in range");
    fuzz_check(o.owner == NULL || fg_valid_name(o.owner, 128), "owner is valid");
    if (o.command != NULL) {
        fuzz_check(o.command >= argv + 1 && o.command <= argv + argc, "COMMAND is inside argv");
    }
    if (o.help || o.version) {
        free(err);
        return;
    }
    fuzz_check(o.cmd >= FC_CMD_LOCK && o.cmd <= FC_CMD_RELEASE, "a command was given");
    fuzz_check(in_argv(o.prefix, argv, argc) && in_argv(o.reason, argv, argc),
               "strings point into argv");
    if (o.cmd == FC_CMD_LS) {
        /* ls takes an optional PREFIX and no RESOURCE. */
        fuzz_check(o.resource == NULL, "ls has no RESOURCE");
        fuzz_check(o.prefix == NULL || fuzz_valid_name(o.prefix, 200), "PREFIX is valid");
        free(err);
        return;
    }
    fuzz_check(o.resource != NULL && fuzz_valid_name(o.resource, 200), "RESOURCE is valid");
    fuzz_check(o.cmd != FC_CMD_RELEASE || (o.force && o.reason != NULL),
               "release has --force and --reason");
    fuzz_check(o.cmd != FC_CMD_LOCK || (o.command != NULL && o.command[0] != NULL),
               "lock has a COMMAND");
    fuzz_check((o.cmd != FC_CMD_UNLOCK && o.cmd != FC_CMD_RENEW) || o.owner != NULL,
               "unlock and renew have an owner");
    fuzz_check(o.cmd != FC_CMD_WRITE || o.token >= 1, "write has a token");
    free(err);
}

static void check_gateway(int argc, char **argv)
{
    gw_config cfg, again;
    char *err = malloc(600);
    fuzz_check(err != NULL, "malloc");
    err[0] = '\0';

    int rc = gw__config_parse(&cfg, argc, argv, err, 600);
    fuzz_check(rc == 0 || rc == -1, "gw__config_parse returns 0 or -1");
    if (rc != 0) {
        fuzz_check(memchr(err, '\0', 600) != NULL && err[0] != '\0' && printable(err),
                   "a failure has one printable line");
        free(err);
        return;
    }
    fuzz_check(memchr(cfg.listen, '\0', sizeof cfg.listen) != NULL && cfg.listen[0] != '\0' &&
                   memchr(cfg.redis_url, '\0', sizeof cfg.redis_url) != NULL &&
                   cfg.redis_url[0] != '\0' &&
                   memchr(cfg.data_dir, '\0', sizeof cfg.data_dir) != NULL &&
                   cfg.data_dir[0] != '\0' &&
                   memchr(cfg.auth_token_file, '\0', sizeof cfg.auth_token_file) != NULL,
               "strings are non-empty and terminated");
    fuzz_check(cfg.max_value_bytes >= 1 && cfg.max_value_bytes <= 268435456, "max value bytes");
    fuzz_check(cfg.map_size >= 1048576 && cfg.map_size <= 17592186044416ULL, "map size");
    fuzz_check(cfg.threads >= 1 && cfg.threads <= 1024, "threads");
    fuzz_check(cfg.max_connections >= 1 && cfg.max_connections <= 1000000, "max connections");
    fuzz_check((cfg.log_json | cfg.help | cfg.version | cfg.routes | cfg.check_config) <= 1,
               "flags are 0 or 1");
    fuzz_check(gw__config_parse(&again, argc, argv, err, 600) == 0 &&
                   memcmp(&cfg, &again, sizeof cfg) == 0,
               "parsing is deterministic");
    free(err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *args[MAX_ARGS + 2];
    int argc = 1;
    char *text = fuzz_cstr(data, size);
    char prog[] = "fuzz";

    clear_env();
    args[0] = prog;
    /* text holds every byte, NULs included, plus a final NUL: each NUL ends one argument. */
    for (size_t start = 0; start < size && argc <= MAX_ARGS;) {
        args[argc++] = text + start;
        start += strlen(text + start) + 1;
    }
    args[argc] = NULL;

    for (int i = 1; i < argc; i++) {
        int64_t got = -7, want = 0;
        int rc = fc__parse_duration(args[i], &got);
        int ok = oracle_duration(args[i], &want);
        fuzz_check((rc == 0) == ok, "a duration is [0-9]+(ms|s|m), at most a day");
        fuzz_check(rc == 0 ? got == want : got == -7, "the duration's value, or untouched");
    }
    check_fencectl(argc, args);
    check_gateway(argc, args);
    free(text);
    return 0;
}
