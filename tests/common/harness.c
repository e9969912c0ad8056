/* nftw() is an XSI function; setgroups() a BSD one. */
#define _XOPEN_SOURCE 700
#define _DEFAULT_SOURCE

#include "harness.h"
#include "harness_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <grp.h>
#include <pwd.h>

#include <hiredis/hiredis.h>
#include <libpq-fe.h>

int64_t th_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void th_nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

void th_tempdir(char *buf, size_t len, const char *tag)
{
    const char *base = getenv("TMPDIR");
    if (base == NULL || base[0] == '\0') {
        base = "/tmp";
    }
    snprintf(buf, len, "%s/fg-%s-XXXXXX", base, tag);
    if (mkdtemp(buf) == NULL) {
        fprintf(stderr, "harness: mkdtemp %s: %s\n", buf, strerror(errno));
        exit(1);
    }
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void th_rmtree(const char *dir)
{
    if (dir != NULL && dir[0] != '\0') {
        nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    }
}

/* 1 when a TCP socket can bind 127.0.0.1:port right now. */
static int port_bindable(int port)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int ok = 0;

    if (fd < 0) {
        return 0;
    }
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* The lowest port the kernel hands out to outgoing connections (32768 by default). */
static int ephemeral_low(void)
{
    int low = 32768, high = 0;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f != NULL) {
        if (fscanf(f, "%d %d", &low, &high) != 2) {
            low = 32768;
        }
        fclose(f);
    }
    return low;
}

/* Picks a port in [lo, hi) that bind() shows free; when bus is set, port + bus must be free
 * too (a cluster node's bus port). Returns -1 when 200 tries found none. */
static int free_port_in(int lo, int hi, int bus)
{
    static unsigned seed;
    int span = hi - lo;

    if (seed == 0) {
        /* Test programs start together: pid and clock alone can give two the same seed. */
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        if (fd < 0 || read(fd, &seed, sizeof seed) != (ssize_t)sizeof seed) {
            seed = (unsigned)getpid() * 2654435761u ^ (unsigned)th_now_ms();
        }
        if (fd >= 0) {
            close(fd);
        }
        seed |= 1;
    }
    for (int attempt = 0; attempt < 200 && span > 0; attempt++) {
        int port = lo + (int)(rand_r(&seed) % (unsigned)span);
        if (port_bindable(port) && (bus == 0 || port_bindable(port + bus))) {
            return port;
        }
    }
    return -1;
}

/* Picks a port below the kernel's ephemeral range, which bind() shows free. Below that range
 * no outgoing connection can take it by chance, which matters when a test kills a server and
 * starts it again on the same port while other tests open connections. */
int th_free_port(void)
{
    return free_port_in(10000, ephemeral_low(), 0);
}

int th__free_cluster_port(void)
{
    /* The bus port (port + 10000) must stay below the ephemeral range as well, for the
     * same reason, and below 55536 (BENCHMARKING.md): ports 10000 to low - 10000. */
    return free_port_in(10000, ephemeral_low() - TH_CLUSTER_BUS_OFFSET, TH_CLUSTER_BUS_OFFSET);
}

static int redis_pings(const th_redis *r)
{
    struct timeval tv = {0, 200000};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", r->port, tv);
    redisReply *reply = NULL;
    int ok = 0;

    if (ctx == NULL || ctx->err) {
        goto out;
    }
    redisSetTimeout(ctx, tv);
    if (r->password[0] != '\0') {
        reply = redisCommand(ctx, "AUTH %s", r->password);
        freeReplyObject(reply);
    }
    /* Answering is not enough: it must be the server we started, not another test's that
     * took the port after ours failed to bind it. */
    reply = redisCommand(ctx, "INFO server");
    if (reply != NULL && reply->type == REDIS_REPLY_STRING) {
        const char *p = strstr(reply->str, "process_id:");
        ok = p != NULL && strtol(p + strlen("process_id:"), NULL, 10) == (long)r->pid;
    }
    freeReplyObject(reply);
    /* INFO answers while an AOF is still being loaded; PING says -LOADING until it is done,
     * and a test must not meet that (it would read as Redis being unavailable). */
    reply = ok ? redisCommand(ctx, "PING") : NULL;
    ok = reply != NULL && reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "PONG") == 0;
    freeReplyObject(reply);
out:
    if (ctx != NULL) {
        redisFree(ctx);
    }
    return ok;
}

/* Every server the harness started and has not yet reaped, so that a loud failure (exit(1)
 * halfway through starting a topology) does not leave the nodes already up running after the
 * test program: they would hold ports and keep a ctest pipe open. */
#define MAX_CHILDREN 128
static pid_t children[MAX_CHILDREN];
static pid_t children_owner; /* the process that registered them; forks must not kill them */

static void kill_children_at_exit(void)
{
    if (getpid() != children_owner) {
        return;
    }
    for (int i = 0; i < MAX_CHILDREN; i++) {
        /* Only a child of ours still running: a test that reaped one itself leaves its pid
         * here, and that number may belong to another process by now. */
        if (children[i] > 0 && waitpid(children[i], NULL, WNOHANG) == 0) {
            kill(children[i], SIGKILL);
            waitpid(children[i], NULL, 0);
        }
        children[i] = 0;
    }
}

static void child_started(pid_t pid)
{
    if (children_owner == 0) {
        children_owner = getpid();
        atexit(kill_children_at_exit);
    }
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (children[i] == 0) {
            children[i] = pid;
            return;
        }
    }
}

static void child_reaped(pid_t pid)
{
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (children[i] == pid) {
            children[i] = 0;
        }
    }
}

/* Fills argv (room for TH_ARGV_MAX entries) with the command line of r: redis-server with the
 * options every test Redis gets, or redis-sentinel on its config file; then r->args. */
static void node_argv(th_redis *r, const char **argv, char *port, size_t portlen, char *logfile,
                      size_t loglen, char *conf, size_t conflen)
{
    int n = 0;

    snprintf(port, portlen, "%d", r->port);
    snprintf(logfile, loglen, "%s/%s.log", r->dir, r->sentinel ? "sentinel" : "redis");
    if (r->sentinel) {
        /* Sentinel keeps its state (known replicas and sentinels) in its config file. */
        snprintf(conf, conflen, "%s/sentinel.conf", r->dir);
        argv[n++] = "redis-sentinel";
        argv[n++] = conf;
    } else {
        argv[n++] = "redis-server";
    }
    argv[n++] = "--port";
    argv[n++] = port;
    argv[n++] = "--bind";
    argv[n++] = "127.0.0.1";
    argv[n++] = "--dir";
    argv[n++] = r->dir;
    argv[n++] = "--logfile";
    argv[n++] = logfile;
    argv[n++] = "--daemonize";
    argv[n++] = "no";
    if (!r->sentinel) {
        argv[n++] = "--save";
        argv[n++] = "";
        argv[n++] = "--enable-debug-command";
        argv[n++] = "local";
        argv[n++] = "--appendonly";
        argv[n++] = r->appendonly ? "yes" : "no";
        argv[n++] = "--appendfsync";
        argv[n++] = "always";
    }
    if (r->password[0] != '\0') {
        argv[n++] = "--requirepass";
        argv[n++] = r->password;
    }
    for (int i = 0; i < r->nargs; i++) {
        argv[n++] = r->args[i];
    }
    argv[n] = NULL;
}

/* Starts r's server on r->port and waits until it answers. Returns 0, or -1 when it exited
 * before answering (its port was taken). Exits the process on any other failure, and when
 * the binary is missing (never a skip). */
static int spawn_redis(th_redis *r)
{
    char port[16];
    char logfile[300];
    char conf[300];
    const char *argv[TH_ARGV_MAX];

    node_argv(r, argv, port, sizeof port, logfile, sizeof logfile, conf, sizeof conf);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "harness: fork: %s\n", strerror(errno));
        exit(1);
    }
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            dup2(devnull, STDIN_FILENO);
            dup2(devnull, STDOUT_FILENO);
        }
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr,
                "harness: cannot run %s (%s). Install it with "
                "scripts/install-deps.sh; tests never skip without it.\n",
                argv[0], strerror(errno));
        _exit(127);
    }
    r->pid = pid;
    child_started(pid);

    int64_t deadline = th_now_ms() + 10000;
    while (!redis_pings(r)) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
                child_reaped(pid);
                exit(1); /* The child said which binary is missing. */
            }
            fprintf(stderr, "harness: %s exited before answering (status %d); see %s\n",
                    argv[0], status, logfile);
            child_reaped(pid);
            r->pid = 0;
            return -1;
        }
        if (th_now_ms() > deadline) {
            fprintf(stderr, "harness: %s on port %d did not answer PING in 10 s\n", argv[0],
                    r->port);
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            child_reaped(pid);
            exit(1);
        }
        th_nap_ms(10);
    }
    return 0;
}

void th__node_init(th_redis *r, const char *tag, int appendonly, const char *password)
{
    memset(r, 0, sizeof *r);
    th_tempdir(r->dir, sizeof r->dir, tag);
    r->appendonly = appendonly;
    if (password != NULL) {
        snprintf(r->password, sizeof r->password, "%s", password);
    }
}

void th__node_arg(th_redis *r, const char *arg)
{
    if (r->nargs >= TH_NODE_ARGS) {
        fprintf(stderr, "harness: more than %d extra arguments\n", TH_NODE_ARGS);
        exit(1);
    }
    snprintf(r->args[r->nargs++], sizeof r->args[0], "%s", arg);
}

void th__node_spawn(th_redis *r, int cluster_bus)
{
    /* A port taken between picking it and the bind makes the server exit at once: pick
     * another one. */
    for (int attempt = 0; attempt < 5; attempt++) {
        r->port = cluster_bus ? th__free_cluster_port() : th_free_port();
        if (r->password[0] != '\0') {
            snprintf(r->url, sizeof r->url, "redis://:%s@127.0.0.1:%d", r->password, r->port);
        } else {
            snprintf(r->url, sizeof r->url, "redis://127.0.0.1:%d", r->port);
        }
        if (r->port > 0 && spawn_redis(r) == 0) {
            return;
        }
    }
    fprintf(stderr, "harness: could not start %s on a free port\n",
            r->sentinel ? "redis-sentinel" : "redis-server");
    exit(1);
}

void th_redis_start(th_redis *r, int appendonly, const char *password)
{
    th__node_init(r, "redis", appendonly, password);
    th__node_spawn(r, 0);
}

void th_redis_restart(th_redis *r)
{
    /* Same port: the clients under test keep their URL. */
    if (spawn_redis(r) != 0) {
        fprintf(stderr, "harness: redis-server could not restart on port %d\n", r->port);
        exit(1);
    }
}

void th_redis_kill(th_redis *r)
{
    if (r->pid > 0) {
        kill(r->pid, SIGKILL);
        waitpid(r->pid, NULL, 0);
        child_reaped(r->pid);
        r->pid = 0;
    }
}

void th_redis_wipe_files(th_redis *r)
{
    char cmd[700];
    /* appendonlydir/ (Redis 7) and dump.rdb; the log stays for post-mortems. */
    snprintf(cmd, sizeof cmd, "rm -rf '%s/appendonlydir' '%s/dump.rdb'", r->dir, r->dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "harness: wipe failed\n");
    }
}

void th_redis_stop(th_redis *r)
{
    if (r->pid > 0) {
        kill(r->pid, SIGTERM);
        int64_t deadline = th_now_ms() + 5000;
        while (waitpid(r->pid, NULL, WNOHANG) == 0) {
            if (th_now_ms() > deadline) {
                kill(r->pid, SIGKILL);
                waitpid(r->pid, NULL, 0);
                break;
            }
            th_nap_ms(10);
        }
        child_reaped(r->pid);
        r->pid = 0;
    }
    th_rmtree(r->dir);
}

int th_redis_unread_conns(const th_redis *r)
{
    char line[512];
    int n = 0;
    FILE *f = fopen("/proc/net/tcp", "r");
    if (f == NULL) {
        return -1;
    }
    /* "sl local_address rem_address st tx_queue:rx_queue ...", addresses and queues in hex;
     * st 01 is ESTABLISHED, 08 CLOSE_WAIT. The server's end of a connection has the server's
     * port. rx_queue counts sequence numbers, so the client's FIN (CLOSE_WAIT) is one. */
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned local_port, state;
        unsigned long tx, rx;
        if (sscanf(line, " %*u: %*x:%x %*x:%*x %x %lx:%lx", &local_port, &state, &tx, &rx) ==
                4 &&
            (int)local_port == r->port && ((state == 1 && rx > 0) || (state == 8 && rx > 1))) {
            n++;
        }
    }
    fclose(f);
    return n;
}

long long th_redis_cmd(const th_redis *r, char *out, size_t outlen, const char *fmt, ...)
{
    struct timeval tv = {5, 0};
    redisContext *ctx = redisConnectWithTimeout("127.0.0.1", r->port, tv);
    redisReply *reply = NULL;
    long long result = -1;
    va_list ap;

    if (out != NULL && outlen > 0) {
        out[0] = '\0';
    }
    if (ctx == NULL || ctx->err) {
        goto out;
    }
    redisSetTimeout(ctx, tv);
    if (r->password[0] != '\0') {
        freeReplyObject(redisCommand(ctx, "AUTH %s", r->password));
    }
    va_start(ap, fmt);
    reply = redisvCommand(ctx, fmt, ap);
    va_end(ap);
    if (reply == NULL) {
        goto out;
    }
    if (reply->type == REDIS_REPLY_INTEGER) {
        result = reply->integer;
    } else if (reply->type == REDIS_REPLY_STRING || reply->type == REDIS_REPLY_STATUS) {
        result = 0;
        if (out != NULL && outlen > 0) {
            snprintf(out, outlen, "%s", reply->str);
        }
    } else if (reply->type == REDIS_REPLY_NIL) {
        result = 0;
    } else if (reply->type == REDIS_REPLY_ERROR && out != NULL && outlen > 0) {
        snprintf(out, outlen, "%s", reply->str);
    }
    freeReplyObject(reply);
out:
    if (ctx != NULL) {
        redisFree(ctx);
    }
    return result;
}

long long th_redis_script_calls(const th_redis *r)
{
    static const char *const names[] = {"cmdstat_evalsha:calls=", "cmdstat_eval:calls="};
    char *info = malloc(64 * 1024);
    long long total = -1;

    if (info != NULL && th_redis_cmd(r, info, 64 * 1024, "INFO commandstats") == 0) {
        total = 0;
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            const char *p = strstr(info, names[i]);
            total += p != NULL ? strtoll(p + strlen(names[i]), NULL, 10) : 0;
        }
    }
    free(info);
    return total;
}

int th_redis_script_stats(const th_redis *r, th_script_stats *out)
{
    static const char *const not_data[] = {"evalsha:", "eval:", "info:", "config", "script",
                                           "client", "ping:", "hello:", "select:", "auth:",
                                           "command", "subscribe:", "unsubscribe:", "wait:"};
    char *info = malloc(64 * 1024);
    int rc = -1;

    *out = (th_script_stats){0, 0, 0};
    if (info != NULL && th_redis_cmd(r, info, 64 * 1024, "INFO commandstats") == 0) {
        rc = 0;
        for (const char *at = strstr(info, "cmdstat_"); at != NULL;
             at = strstr(at + 1, "cmdstat_")) {
            const char *name = at + strlen("cmdstat_");
            const char *eq = strstr(name, ":calls=");
            if (eq == NULL) {
                break;
            }
            long long n = strtoll(eq + strlen(":calls="), NULL, 10);
            if (strncmp(name, "evalsha:", 8) == 0) {
                out->calls = n;
                const char *us = strstr(eq, ",usec=");
                out->usec = us != NULL ? strtoll(us + strlen(",usec="), NULL, 10) : 0;
                continue;
            }
            int data = 1;
            for (size_t i = 0; i < sizeof not_data / sizeof not_data[0]; i++) {
                data = data && strncmp(name, not_data[i], strlen(not_data[i])) != 0;
            }
            out->cmds += data ? n : 0;
        }
    }
    free(info);
    return rc;
}

/* Finds the directory holding initdb: Debian keeps it off PATH. Exits when there is none. */
static void pg_find_bindir(th_pg *pg)
{
    const char *fixed = "/usr/lib/postgresql/15/bin";
    char path[512];

    snprintf(path, sizeof path, "%s/initdb", fixed);
    if (access(path, X_OK) == 0) {
        snprintf(pg->bindir, sizeof pg->bindir, "%s", fixed);
        return;
    }
    FILE *p = popen("pg_config --bindir 2>/dev/null", "r");
    if (p != NULL) {
        if (fgets(pg->bindir, sizeof pg->bindir, p) != NULL) {
            pg->bindir[strcspn(pg->bindir, "\n")] = '\0';
        }
        pclose(p);
    }
    snprintf(path, sizeof path, "%s/initdb", pg->bindir);
    if (pg->bindir[0] == '\0' || access(path, X_OK) != 0) {
        fprintf(stderr, "harness: initdb not found in %s or `pg_config --bindir`. Install "
                        "postgresql-15 with scripts/install-deps.sh; tests never skip without "
                        "it.\n", fixed);
        exit(1);
    }
}

/* In a forked child: become the postgres user when root (initdb and postgres refuse root),
 * send output to DIR/<log>, and exec argv. Never returns. */
static void pg_exec_child(const th_pg *pg, const char *log, char *const argv[])
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s", pg->dir, log);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
    }
    if (geteuid() == 0) {
        struct passwd *pw = getpwnam("postgres");
        if (pw == NULL || setgroups(0, NULL) != 0 || setgid(pw->pw_gid) != 0 ||
            setuid(pw->pw_uid) != 0) {
            fprintf(stderr, "harness: cannot become the postgres user\n");
            _exit(126);
        }
    }
    execv(argv[0], argv);
    fprintf(stderr, "harness: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

static int pg_accepts(const th_pg *pg)
{
    char conninfo[512];
    snprintf(conninfo, sizeof conninfo,
             "host=%s port=%d dbname=postgres user=postgres connect_timeout=2", pg->dir,
             pg->port);
    return PQping(conninfo) == PQPING_OK;
}

/* Starts the postmaster and waits until it accepts connections. 0, or -1 when it exited
 * first (its port was taken, or old backends still hold its shared memory). */
static int pg_spawn(th_pg *pg)
{
    char bin[400], data[300], port[16];
    snprintf(bin, sizeof bin, "%s/postgres", pg->bindir);
    snprintf(data, sizeof data, "%s/data", pg->dir);
    snprintf(port, sizeof port, "%d", pg->port);
    char *const argv[] = {bin, "-D", data, "-p", port, "-k", pg->dir,
                          "-c", "listen_addresses=127.0.0.1", "-c", "fsync=on",
                          "-c", "synchronous_commit=on", "-c", "max_connections=200", NULL};
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "harness: fork: %s\n", strerror(errno));
        exit(1);
    }
    if (pid == 0) {
        pg_exec_child(pg, "postgres.log", argv);
    }
    pg->pid = pid;
    int64_t deadline = th_now_ms() + 30000;
    while (!pg_accepts(pg)) {
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            pg->pid = 0;
            return -1;
        }
        if (th_now_ms() > deadline) {
            fprintf(stderr, "harness: postgres on port %d did not accept connections in 30 s; "
                            "see %s/postgres.log\n", pg->port, pg->dir);
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            exit(1);
        }
        th_nap_ms(20);
    }
    return 0;
}

void th_pg_start(th_pg *pg)
{
    char bin[400], data[300], pwfile[300];
    memset(pg, 0, sizeof *pg);
    pg_find_bindir(pg);
    th_tempdir(pg->dir, sizeof pg->dir, "pg");
    /* A password no text of the test would contain by chance, so a test can look for it. */
    unsigned char rnd[8] = {0};
    int rfd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (rfd < 0 || read(rfd, rnd, sizeof rnd) != (ssize_t)sizeof rnd) {
        fprintf(stderr, "harness: cannot read /dev/urandom\n");
        exit(1);
    }
    close(rfd);
    snprintf(pg->password, sizeof pg->password, "pw%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0],
             rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
    snprintf(pwfile, sizeof pwfile, "%s/pwfile", pg->dir);
    FILE *f = fopen(pwfile, "w");
    if (f == NULL || fprintf(f, "%s\n", pg->password) < 0 || fclose(f) != 0) {
        fprintf(stderr, "harness: cannot write %s\n", pwfile);
        exit(1);
    }
    if (geteuid() == 0) {
        struct passwd *pw = getpwnam("postgres");
        if (pw == NULL || chown(pg->dir, pw->pw_uid, pw->pw_gid) != 0 ||
            chown(pwfile, pw->pw_uid, pw->pw_gid) != 0) {
            fprintf(stderr, "harness: running as root, but cannot hand %s to the postgres "
                            "user (initdb refuses root)\n", pg->dir);
            exit(1);
        }
    }
    snprintf(bin, sizeof bin, "%s/initdb", pg->bindir);
    snprintf(data, sizeof data, "%s/data", pg->dir);
    char pwopt[320];
    snprintf(pwopt, sizeof pwopt, "--pwfile=%s", pwfile);
    char *const argv[] = {bin, "-D", data, "-U", "postgres", pwopt, "--auth-local=trust",
                          "--auth-host=scram-sha-256", "-E", "UTF8", "--no-instructions",
                          NULL};
    pid_t pid = fork();
    if (pid == 0) {
        pg_exec_child(pg, "initdb.log", argv);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
        fprintf(stderr, "harness: initdb failed; see %s/initdb.log\n", pg->dir);
        exit(1);
    }
    for (int attempt = 0; attempt < 5; attempt++) {
        pg->port = th_free_port();
        if (pg->port > 0 && pg_spawn(pg) == 0) {
            return;
        }
    }
    fprintf(stderr, "harness: could not start postgres on a free port; see %s/postgres.log\n",
            pg->dir);
    exit(1);
}

void th_pg_restart(th_pg *pg)
{
    /* After a crash the old backends notice the postmaster is gone and exit, releasing its
     * shared memory; until then a new postmaster refuses to start. */
    int64_t deadline = th_now_ms() + 30000;
    while (pg_spawn(pg) != 0) {
        if (th_now_ms() > deadline) {
            fprintf(stderr, "harness: postgres could not restart on port %d; see "
                            "%s/postgres.log\n", pg->port, pg->dir);
            exit(1);
        }
        th_nap_ms(50);
    }
}

/* The state letter of process pid ('Z' for a zombie), or 0 when it is gone. */
static char proc_state(int pid)
{
    char path[64], comm[256], st = 0;
    int got = 0;
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *fp = fopen(path, "r");
    if (fp != NULL) {
        if (fscanf(fp, "%d %255s %c", &got, comm, &st) != 3) {
            st = 0;
        }
        fclose(fp);
    }
    return st;
}

/* Signals every child of the postmaster, then the postmaster; records up to max of the
 * children's pids in pids (may be NULL) and returns how many it signalled. */
static int pg_signal_all(th_pg *pg, int sig, int *pids, int max)
{
    int n = 0;
    DIR *d = opendir("/proc");
    struct dirent *e = NULL;
    while (d != NULL && (e = readdir(d)) != NULL) {
        char path[300];
        int pid = 0, ppid = 0;
        char comm[256];
        char st = 0;
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *fp = fopen(path, "r");
        if (fp == NULL) {
            continue;
        }
        if (fscanf(fp, "%d %255s %c %d", &pid, comm, &st, &ppid) == 4 && ppid == pg->pid) {
            kill(pid, sig);
            if (pids != NULL && n < max) {
                pids[n] = pid;
            }
            n++;
        }
        fclose(fp);
    }
    if (d != NULL) {
        closedir(d);
    }
    /* Last: once the postmaster is gone, its children are no longer its children. */
    if (pg->pid > 0) {
        kill(pg->pid, sig);
    }
    return n;
}

void th_pg_signal(th_pg *pg, int sig)
{
    pg_signal_all(pg, sig, NULL, 0);
}

#define PG_CHILDREN_MAX 256

void th_pg_kill(th_pg *pg)
{
    int pids[PG_CHILDREN_MAX];
    if (pg->pid > 0) {
        /* Backends too: a postmaster killed alone leaves its backends serving their
         * connections until they notice, and a write can still commit through one. */
        int n = pg_signal_all(pg, SIGKILL, pids, PG_CHILDREN_MAX);
        waitpid(pg->pid, NULL, 0);
        pg->pid = 0;
        /* Until each backend has exited, its sockets are open: a client could still send
         * into one, and find out only from the reset that follows. */
        int64_t deadline = th_now_ms() + 30000;
        for (int i = 0; i < n && i < PG_CHILDREN_MAX; i++) {
            while (proc_state(pids[i]) != 0 && proc_state(pids[i]) != 'Z') {
                if (th_now_ms() > deadline) {
                    fprintf(stderr, "harness: postgres backend %d outlived SIGKILL\n",
                            pids[i]);
                    exit(1);
                }
                th_nap_ms(5);
            }
        }
    }
}

void th_pg_stop_immediate(th_pg *pg)
{
    if (pg->pid > 0) {
        kill(pg->pid, SIGQUIT);
        waitpid(pg->pid, NULL, 0);
        pg->pid = 0;
    }
}

/* The small disks mounted and not yet unmounted: a test that ends through exit() (a harness
 * failure) unmounts them at exit, so no mount outlives the process that made it; only a
 * crash can leave one behind. */
#define SMALL_DISKS_MAX 4
static char small_disks[SMALL_DISKS_MAX][256];

static void small_disk_unmount(const char *path)
{
    for (int i = 0; path[0] != '\0' && i < SMALL_DISKS_MAX; i++) {
        if (strcmp(small_disks[i], path) != 0) {
            continue;
        }
        /* Detached: a server killed a moment ago may still be closing its files. */
        if (umount2(path, MNT_DETACH) != 0) {
            fprintf(stderr, "harness: cannot unmount %s: %s\n", path, strerror(errno));
        }
        small_disks[i][0] = '\0';
    }
}

static void small_disks_at_exit(void)
{
    for (int i = 0; i < SMALL_DISKS_MAX; i++) {
        small_disk_unmount(small_disks[i]);
    }
}

void th_pg_stop(th_pg *pg)
{
    if (pg->pid > 0) {
        /* SIGINT: fast shutdown, which ends the sessions still connected. */
        kill(pg->pid, SIGINT);
        int64_t deadline = th_now_ms() + 10000;
        while (waitpid(pg->pid, NULL, WNOHANG) == 0) {
            if (th_now_ms() > deadline) {
                kill(pg->pid, SIGKILL);
                waitpid(pg->pid, NULL, 0);
                break;
            }
            th_nap_ms(10);
        }
        pg->pid = 0;
    }
    small_disk_unmount(pg->small_disk);
    pg->small_disk[0] = '\0';
    th_rmtree(pg->dir);
}

void th_pg_small_disk(th_pg *pg, size_t bytes, char *buf, size_t len)
{
    static int registered;
    int slot = -1;
    char opts[128];
    uid_t uid = geteuid();
    gid_t gid = getegid();

    if (geteuid() == 0) {
        struct passwd *pw = getpwnam("postgres"); /* the server runs as it (pg_exec_child) */
        if (pw != NULL) {
            uid = pw->pw_uid;
            gid = pw->pw_gid;
        }
    }
    int n = snprintf(pg->small_disk, sizeof pg->small_disk, "%.200s/small-disk", pg->dir);
    if (n < 0 || (size_t)n >= sizeof pg->small_disk) {
        fprintf(stderr, "harness: temp dir path too long for the small disk\n");
        exit(1);
    }
    snprintf(opts, sizeof opts, "size=%zu,mode=0700,uid=%u,gid=%u", bytes, (unsigned)uid,
             (unsigned)gid);
    for (int i = 0; i < SMALL_DISKS_MAX && slot < 0; i++) {
        slot = small_disks[i][0] == '\0' ? i : -1;
    }
    if (!registered) {
        registered = atexit(small_disks_at_exit) == 0;
    }
    if (slot < 0 || !registered || mkdir(pg->small_disk, 0700) != 0 ||
        mount("tmpfs", pg->small_disk, "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0) {
        fprintf(stderr, "harness: cannot mount a %zu-byte tmpfs at %s (%s): the disk-full "
                        "test needs root (CAP_SYS_ADMIN) to give PostgreSQL a disk that "
                        "really fills up; it never skips\n", bytes, pg->small_disk,
                strerror(errno));
        pg->small_disk[0] = '\0';
        exit(1);
    }
    snprintf(small_disks[slot], sizeof small_disks[slot], "%s", pg->small_disk);
    snprintf(buf, len, "%s", pg->small_disk);
}

int th_pg_log_count(const th_pg *pg, const char *what)
{
    char path[320], line[4096];
    int n = 0;
    snprintf(path, sizeof path, "%.300s/postgres.log", pg->dir);
    FILE *fp = fopen(path, "r");
    if (fp == NULL) {
        fprintf(stderr, "harness: cannot read %s: %s\n", path, strerror(errno));
        exit(1);
    }
    while (fgets(line, sizeof line, fp) != NULL) {
        n += strstr(line, what) != NULL;
    }
    fclose(fp);
    return n;
}

void th_pg_url(const th_pg *pg, const char *db, char *buf, size_t len)
{
    snprintf(buf, len, "postgresql://postgres:%s@127.0.0.1:%d/%s", pg->password, pg->port, db);
}

int th_pg_exec(const th_pg *pg, const char *sql)
{
    char conninfo[512];
    snprintf(conninfo, sizeof conninfo,
             "host=%s port=%d dbname=postgres user=postgres connect_timeout=5", pg->dir,
             pg->port);
    PGconn *conn = PQconnectdb(conninfo);
    int rc = -1;
    if (PQstatus(conn) != CONNECTION_OK) {
        fprintf(stderr, "harness: psql connect: %s", PQerrorMessage(conn));
    } else {
        PGresult *res = PQexec(conn, sql);
        ExecStatusType es = PQresultStatus(res);
        rc = es == PGRES_COMMAND_OK || es == PGRES_TUPLES_OK ? 0 : -1;
        if (rc != 0) {
            fprintf(stderr, "harness: %s: %s", sql, PQresultErrorMessage(res));
        }
        PQclear(res);
    }
    PQfinish(conn);
    return rc;
}

int th_pq_exec(PGconn *conn, const char *sql)
{
    PGresult *res = PQexec(conn, sql);
    ExecStatusType es = PQresultStatus(res);
    int rc = es == PGRES_COMMAND_OK || es == PGRES_TUPLES_OK ? 0 : -1;
    if (rc != 0) {
        fprintf(stderr, "harness: %s: %s", sql, PQresultErrorMessage(res));
    }
    PQclear(res);
    return rc;
}

int th_pg_hold_commits(PGconn *conn, const char *prefix, long key)
{
    char fn[512];
    snprintf(fn, sizeof fn,
             "CREATE FUNCTION fg_test_hold() RETURNS trigger LANGUAGE plpgsql AS $$ "
             "BEGIN IF starts_with(NEW.resource, '%s') THEN LOOP BEGIN "
             "PERFORM pg_advisory_xact_lock(%ld); EXIT; "
             "EXCEPTION WHEN query_canceled THEN NULL; END; END LOOP; END IF; "
             "RETURN NULL; END $$",
             prefix, key);
    return th_pq_exec(conn, fn) == 0 &&
                   th_pq_exec(conn, "CREATE CONSTRAINT TRIGGER fg_test_hold AFTER INSERT OR "
                                    "UPDATE ON fencegate_resources DEFERRABLE INITIALLY "
                                    "DEFERRED FOR EACH ROW EXECUTE FUNCTION fg_test_hold()") == 0
               ? 0
               : -1;
}

redisReply *th__node_command_argv(const th_redis *r, int argc, const char **argv)
{
    struct timeval tv = {5, 0};
    redisContext *ctx = NULL;
    redisReply *reply = NULL;

    if (r->pid <= 0) {
        return NULL; /* Killed: a connection could reach whoever took its port. */
    }
    ctx = redisConnectWithTimeout("127.0.0.1", r->port, tv);
    if (ctx == NULL || ctx->err) {
        goto out;
    }
    redisSetTimeout(ctx, tv);
    if (r->password[0] != '\0') {
        freeReplyObject(redisCommand(ctx, "AUTH %s", r->password));
    }
    reply = redisCommandArgv(ctx, argc, argv, NULL);
out:
    if (ctx != NULL) {
        redisFree(ctx);
    }
    return reply;
}

redisReply *th__node_command(const th_redis *r, const char *fmt, ...)
{
    struct timeval tv = {5, 0};
    redisContext *ctx = NULL;
    redisReply *reply = NULL;
    va_list ap;

    if (r->pid <= 0) {
        return NULL;
    }
    ctx = redisConnectWithTimeout("127.0.0.1", r->port, tv);
    if (ctx == NULL || ctx->err) {
        goto out;
    }
    redisSetTimeout(ctx, tv);
    if (r->password[0] != '\0') {
        freeReplyObject(redisCommand(ctx, "AUTH %s", r->password));
    }
    va_start(ap, fmt);
    reply = redisvCommand(ctx, fmt, ap);
    va_end(ap);
out:
    if (ctx != NULL) {
        redisFree(ctx);
    }
    return reply;
}

int th__info_field(const char *info, const char *field, char *out, size_t outlen)
{
    size_t flen = strlen(field);
    const char *p = info;

    while (p != NULL && *p != '\0') {
        if (strncmp(p, field, flen) == 0 && p[flen] == ':') {
            const char *v = p + flen + 1;
            size_t n = strcspn(v, "\r\n");
            snprintf(out, outlen, "%.*s", (int)n, v);
            return 0;
        }
        p = strchr(p, '\n');
        if (p != NULL) {
            p++;
        }
    }
    if (outlen > 0) {
        out[0] = '\0';
    }
    return -1;
}

const redisReply *th__map_get(const redisReply *map, const char *key)
{
    if (map == NULL || map->type != REDIS_REPLY_ARRAY) {
        return NULL;
    }
    /* RESP2 sends a map as a flat array: key, value, key, value. */
    for (size_t i = 0; i + 1 < map->elements; i += 2) {
        const redisReply *k = map->element[i];
        if ((k->type == REDIS_REPLY_STRING || k->type == REDIS_REPLY_STATUS) &&
            strcmp(k->str, key) == 0) {
            return map->element[i + 1];
        }
    }
    return NULL;
}

long long th__map_int(const redisReply *map, const char *key)
{
    const redisReply *v = th__map_get(map, key);
    if (v == NULL) {
        return -1;
    }
    if (v->type == REDIS_REPLY_INTEGER) {
        return v->integer;
    }
    if (v->type == REDIS_REPLY_STRING || v->type == REDIS_REPLY_STATUS) {
        return strtoll(v->str, NULL, 10);
    }
    return -1;
}

const char *th__map_str(const redisReply *map, const char *key)
{
    const redisReply *v = th__map_get(map, key);
    if (v == NULL || (v->type != REDIS_REPLY_STRING && v->type != REDIS_REPLY_STATUS)) {
        return "";
    }
    return v->str;
}

int th__role_is(const th_redis *r, const char *role)
{
    redisReply *reply = th__node_command(r, "ROLE");
    int ok = reply != NULL && reply->type == REDIS_REPLY_ARRAY && reply->elements > 0 &&
             reply->element[0]->type == REDIS_REPLY_STRING &&
             strcmp(reply->element[0]->str, role) == 0;
    freeReplyObject(reply);
    return ok;
}

void th__append(char *buf, size_t len, const char *fmt, ...)
{
    size_t used = strlen(buf);
    va_list ap;

    va_start(ap, fmt);
    int n = vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= len - used) {
        fprintf(stderr, "harness: a URL or list did not fit in %zu bytes\n", len);
        exit(1);
    }
}

void th_redis_set_start(th_redis_set *s, int n, const char *password)
{
    memset(s, 0, sizeof *s);
    if (n < 1 || n > TH_MAX_NODES) {
        fprintf(stderr, "harness: a Redis set has 1 to %d nodes, not %d\n", TH_MAX_NODES, n);
        exit(1);
    }
    s->n = n;
    for (int i = 0; i < n; i++) {
        /* The same server as th_redis_start(r, 1, ...): AOF with appendfsync always, as a
         * Redlock node that loses no acknowledged write on a restart. */
        th_redis_start(&s->nodes[i], 1, password);
        th__append(s->urls, sizeof s->urls, "%s%s", i > 0 ? "," : "", s->nodes[i].url);
    }
}

void th_redis_set_stop(th_redis_set *s)
{
    for (int i = 0; i < s->n; i++) {
        th_redis_stop(&s->nodes[i]);
    }
    s->n = 0;
}
