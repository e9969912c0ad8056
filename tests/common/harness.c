/* nftw() is an XSI function. */
#define _XOPEN_SOURCE 700

#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

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

/* Picks a port below the kernel's ephemeral range, which bind() shows free. Below that range
 * no outgoing connection can take it by chance, which matters when a test kills a server and
 * starts it again on the same port while other tests open connections. */
int th_free_port(void)
{
    static unsigned seed;
    int low = ephemeral_low();
    int span = low - 10000;

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
        int port = 10000 + (int)(rand_r(&seed) % (unsigned)span);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a;
        if (fd < 0) {
            return -1;
        }
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons((uint16_t)port);
        int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
        close(fd);
        if (ok) {
            return port;
        }
    }
    return -1;
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

/* Starts redis-server on r->port and waits until it answers. Returns 0, or -1 when it
 * exited before answering (its port was taken). Exits the process on any other failure. */
static int spawn_redis(th_redis *r)
{
    char port[16];
    char logfile[300];
    const char *argv[32];
    int n = 0;

    snprintf(port, sizeof port, "%d", r->port);
    snprintf(logfile, sizeof logfile, "%s/redis.log", r->dir);
    argv[n++] = "redis-server";
    argv[n++] = "--port";
    argv[n++] = port;
    argv[n++] = "--bind";
    argv[n++] = "127.0.0.1";
    argv[n++] = "--dir";
    argv[n++] = r->dir;
    argv[n++] = "--logfile";
    argv[n++] = logfile;
    argv[n++] = "--save";
    argv[n++] = "";
    argv[n++] = "--daemonize";
    argv[n++] = "no";
    argv[n++] = "--enable-debug-command";
    argv[n++] = "local";
    argv[n++] = "--appendonly";
    argv[n++] = r->appendonly ? "yes" : "no";
    argv[n++] = "--appendfsync";
    argv[n++] = "always";
    if (r->password[0] != '\0') {
        argv[n++] = "--requirepass";
        argv[n++] = r->password;
    }
    argv[n] = NULL;

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
        execvp("redis-server", (char *const *)argv);
        fprintf(stderr,
                "harness: cannot run redis-server (%s). Install it with "
                "scripts/install-deps.sh; tests never skip without it.\n",
                strerror(errno));
        _exit(127);
    }
    r->pid = pid;

    int64_t deadline = th_now_ms() + 10000;
    while (!redis_pings(r)) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            fprintf(stderr, "harness: redis-server exited before answering (status %d); see %s\n",
                    status, logfile);
            r->pid = 0;
            return -1;
        }
        if (th_now_ms() > deadline) {
            fprintf(stderr, "harness: redis-server on port %d did not answer PING in 10 s\n",
                    r->port);
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            exit(1);
        }
        th_nap_ms(10);
    }
    return 0;
}

void th_redis_start(th_redis *r, int appendonly, const char *password)
{
    memset(r, 0, sizeof *r);
    th_tempdir(r->dir, sizeof r->dir, "redis");
    r->appendonly = appendonly;
    if (password != NULL) {
        snprintf(r->password, sizeof r->password, "%s", password);
    }
    /* A port taken between th_free_port() and the bind makes redis exit at once; try again. */
    for (int attempt = 0; attempt < 5; attempt++) {
        r->port = th_free_port();
        if (r->password[0] != '\0') {
            snprintf(r->url, sizeof r->url, "redis://:%s@127.0.0.1:%d", r->password, r->port);
        } else {
            snprintf(r->url, sizeof r->url, "redis://127.0.0.1:%d", r->port);
        }
        if (r->port > 0 && spawn_redis(r) == 0) {
            return;
        }
    }
    fprintf(stderr, "harness: could not start redis-server on a free port\n");
    exit(1);
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
        r->pid = 0;
    }
    th_rmtree(r->dir);
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
