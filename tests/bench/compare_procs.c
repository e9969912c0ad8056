/*
 * Starting, waiting for, measuring and stopping the benchmark's child processes by PID.
 * See compare_procs.h.
 */
#include "compare_procs.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_PROCS 16

static cp_proc *g_procs[MAX_PROCS];

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void track(cp_proc *p)
{
    for (int i = 0; i < MAX_PROCS; i++) {
        if (g_procs[i] == NULL) {
            g_procs[i] = p;
            return;
        }
    }
}

static void untrack(cp_proc *p)
{
    for (int i = 0; i < MAX_PROCS; i++) {
        if (g_procs[i] == p) {
            g_procs[i] = NULL;
        }
    }
}

int cp_spawn(cp_proc *p, const char *name, char *const argv[], const char *log_path)
{
    p->name = name;
    p->pid = fork();
    if (p->pid < 0) {
        fprintf(stderr, "compare_bench: fork for %s: %s\n", name, strerror(errno));
        return -1;
    }
    if (p->pid == 0) {
        int in = open("/dev/null", O_RDONLY);
        int out = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (in >= 0) {
            dup2(in, STDIN_FILENO);
        }
        if (out >= 0) {
            dup2(out, STDOUT_FILENO);
            dup2(out, STDERR_FILENO);
        }
        execvp(argv[0], argv);
        fprintf(stderr, "compare_bench: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    track(p);
    return 0;
}

/* One GET with a 1 s socket timeout, read until the server closes or buf is full (buf
 * NUL-terminated). Returns the HTTP status, or -1. */
static int http_get(int port, const char *path, char *buf, size_t len)
{
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct timeval tv = {1, 0};
    size_t have = 0;
    int status = -1;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

    buf[0] = '\0';
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0) {
        int n = snprintf(buf, len,
                         "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", path);
        if (n > 0 && (size_t)n < len && send(fd, buf, (size_t)n, MSG_NOSIGNAL) == n) {
            ssize_t got;
            while (have + 1 < len && (got = recv(fd, buf + have, len - 1 - have, 0)) > 0) {
                have += (size_t)got;
            }
        }
    }
    close(fd);
    buf[have] = '\0';
    if (have >= 12 && strncmp(buf, "HTTP/1.", 7) == 0) {
        status = atoi(buf + 9);
    }
    return status;
}

static int http_get_status(int port, const char *path)
{
    char buf[256];
    return http_get(port, path, buf, sizeof buf);
}

long long cp_metric(int port, const char *name)
{
    static char resp[256 * 1024]; /* the benchmarks read metrics from one thread */
    char key[160];

    if (http_get(port, "/metrics", resp, sizeof resp) != 200) {
        return -1;
    }
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(resp, key);
    return p != NULL ? strtoll(p + strlen(key), NULL, 10) : -1;
}

int cp_wait_http(cp_proc *p, const char *path, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    int wstatus = 0;

    while (http_get_status(p->port, path) != 200) {
        if (waitpid(p->pid, &wstatus, WNOHANG) == p->pid) {
            fprintf(stderr, "compare_bench: %s exited before it answered (wait status %d)\n",
                    p->name, wstatus);
            untrack(p);
            p->pid = 0;
            return -1;
        }
        if (now_ms() > deadline) {
            fprintf(stderr, "compare_bench: %s did not answer GET %s on port %d in %d ms\n",
                    p->name, path, p->port, timeout_ms);
            return -1;
        }
        nap_ms(20);
    }
    return 0;
}

int cp_stop(cp_proc *p, int sig, int timeout_ms)
{
    int wstatus = -1;
    if (p->pid <= 0) {
        return -1;
    }
    kill(p->pid, sig);
    int64_t deadline = now_ms() + timeout_ms;
    while (waitpid(p->pid, &wstatus, WNOHANG) == 0) {
        if (now_ms() > deadline) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &wstatus, 0);
            break;
        }
        nap_ms(10);
    }
    untrack(p);
    p->pid = 0;
    return wstatus;
}

void cp_stop_all(void)
{
    for (int i = 0; i < MAX_PROCS; i++) {
        if (g_procs[i] != NULL) {
            cp_stop(g_procs[i], SIGTERM, 10000);
        }
    }
}

/* Reads /proc/PID/stat into buf and returns where its fields after the command name start
 * (field 3, the state), or NULL. The name may hold spaces and parentheses, so fields are
 * counted after the last ')'. */
static const char *stat_fields(pid_t pid, char *buf, size_t len)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return NULL;
    }
    size_t n = fread(buf, 1, len - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return p != NULL && p[1] == ' ' ? p + 2 : NULL;
}

int cp_cpu_seconds(pid_t pid, double *user_s, double *sys_s)
{
    char buf[1024];
    unsigned long long utime = 0, stime = 0;
    const char *p = stat_fields(pid, buf, sizeof buf);
    /* utime and stime are fields 14 and 15, that is the 12th and 13th from the state. */
    if (p == NULL ||
        sscanf(p, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) !=
            2) {
        return -1;
    }
    double hz = (double)sysconf(_SC_CLK_TCK);
    *user_s = (double)utime / hz;
    *sys_s = (double)stime / hz;
    return 0;
}

pid_t cp_parent_pid(pid_t pid)
{
    char buf[1024];
    int ppid = -1;
    const char *p = stat_fields(pid, buf, sizeof buf);
    if (p == NULL || sscanf(p, "%*c %d", &ppid) != 1) {
        return -1;
    }
    return (pid_t)ppid;
}

long cp_status_kb(pid_t pid, const char *field)
{
    char path[64], line[256];
    long kb = -1;
    size_t flen = strlen(field);
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return -1;
    }
    while (fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
            kb = atol(line + flen + 1);
            break;
        }
    }
    fclose(f);
    return kb;
}
