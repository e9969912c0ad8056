/*
 * The processes of the comparison benchmark other than Redis (tests/common/harness.h starts
 * that one): the gateway, etcd, the trivial HTTP server and perf. Each is started on a free
 * loopback port, waited for with a deadline, and stopped by its PID; whatever is still
 * running when the benchmark exits, however it exits, is stopped too.
 */
#ifndef FG_BENCH_COMPARE_PROCS_H
#define FG_BENCH_COMPARE_PROCS_H

#include <stdint.h>
#include <sys/types.h>

typedef struct cp_proc {
    const char *name;
    pid_t pid;
    int port;
} cp_proc;

/* Starts argv (argv[0] is looked up in PATH) with stdin from /dev/null and stdout and
 * stderr to log_path, and registers it to be stopped at exit. Returns 0 or -1 (printed). */
int cp_spawn(cp_proc *p, const char *name, char *const argv[], const char *log_path);

/* Waits up to timeout_ms for GET path on 127.0.0.1:p->port to answer 200. Returns 0, or -1
 * (printed) when the process exits first or the deadline passes. */
int cp_wait_http(cp_proc *p, const char *path, int timeout_ms);

/* The value of the unlabelled metric `name` in GET /metrics of the gateway on 127.0.0.1:port,
 * or -1. Not thread-safe (one static buffer). */
long long cp_metric(int port, const char *name);

/* Sends sig, waits up to timeout_ms for the exit, then SIGKILLs. Returns the wait status
 * (or -1 when it was not running). */
int cp_stop(cp_proc *p, int sig, int timeout_ms);

/* Stops every registered process still running (SIGTERM, then SIGKILL). */
void cp_stop_all(void);

/* CPU time of pid in seconds, user and system, from /proc/PID/stat. Returns 0 or -1. */
int cp_cpu_seconds(pid_t pid, double *user_s, double *sys_s);

/* The parent pid of pid, from /proc/PID/stat, or -1. */
pid_t cp_parent_pid(pid_t pid);

/* A "Vm...:" line of /proc/PID/status in kB (field "VmHWM" or "VmRSS"), or -1. */
long cp_status_kb(pid_t pid, const char *field);

#endif
