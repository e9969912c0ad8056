/*
 * Logging on stderr: one line per request, plus a few lines about the process itself.
 *
 * A request line holds the method, the path, the status and the duration in microseconds,
 * nothing else: never an owner (bodies are not logged at all), never a header (so neither
 * Authorization nor Idempotency-Key), never a Redis password. Paths were reduced to
 * printable ASCII without quotes or backslashes when the request arrived, so a client cannot
 * forge log lines or break the JSON format.
 *
 * Buffered: a write(2) per request would be one system call per request on the request's
 * own thread. Between gw__log_start() and gw__log_stop(), lines go whole into one
 * buffer under a mutex, in the order they were formatted, and the flusher thread writes the
 * buffer with as few write(2) calls as it takes, at most FLUSH_DELAY_MS after the first line
 * of a burst, or at once when it is half full. So:
 *   - a request never waits for stderr: when the buffer is full (stderr blocked, a pipe
 *     nobody reads), the line is dropped and counted (fencegate_log_lines_dropped_total);
 *   - a clean stop (SIGTERM, SIGINT) loses nothing: gw__log_stop() flushes the rest, after
 *     the server has stopped and before "stopped" is written;
 *   - a crash or SIGKILL loses at most the lines of the last FLUSH_DELAY_MS;
 *   - before start and after stop (configuration errors, the last lines), lines are
 *     written directly.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sys/prctl.h>

#include "rt/log.h"
#include "rt/util.h"

#define LOG_BUF_BYTES (256 * 1024)
#define FLUSH_DELAY_MS 20

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* flusher: lines arrived, half full, or stop */
    char buf[LOG_BUF_BYTES];    /* lines not yet written */
    size_t len;
    int running;                /* the flusher runs: lines go to buf */
    int stopping;
    pthread_t thread;
    char out[LOG_BUF_BYTES];    /* the flusher's copy, written without the mutex */
    atomic_ullong dropped;
} lg = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* write(2) of all of buf to stderr, retried on EINTR and short writes; gives up on other
 * errors (there is nowhere to report them). */
static void write_all(const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(STDERR_FILENO, buf, len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return;
        }
        buf += n;
        len -= (size_t)n;
    }
}

/* Moves the buffer out under the mutex (held on entry and on return) and writes it without. */
static void flush_locked(void)
{
    size_t len = lg.len;
    memcpy(lg.out, lg.buf, len);
    lg.len = 0;
    pthread_mutex_unlock(&lg.mu);
    write_all(lg.out, len);
    pthread_mutex_lock(&lg.mu);
}

static void *flusher_main(void *arg)
{
    (void)arg;

    prctl(PR_SET_NAME, "fg-log", 0, 0, 0);
    pthread_mutex_lock(&lg.mu);
    while (!lg.stopping || lg.len > 0) {
        if (lg.len == 0) {
            pthread_cond_wait(&lg.cv, &lg.mu);
            continue;
        }
        /* A burst has begun: gather more for up to FLUSH_DELAY_MS, unless half full. */
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += FLUSH_DELAY_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!lg.stopping && lg.len < LOG_BUF_BYTES / 2 &&
               pthread_cond_timedwait(&lg.cv, &lg.mu, &until) == 0) {
        }
        flush_locked();
    }
    pthread_mutex_unlock(&lg.mu);
    return NULL;
}

int gw__log_start(void)
{
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) {
        return -1;
    }
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&lg.cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0) {
        return -1;
    }
    pthread_mutex_lock(&lg.mu);
    lg.stopping = 0;
    lg.len = 0;
    rc = pthread_create(&lg.thread, NULL, flusher_main, NULL);
    lg.running = rc == 0;
    pthread_mutex_unlock(&lg.mu);
    if (rc != 0) {
        pthread_cond_destroy(&lg.cv);
        return -1;
    }
    return 0;
}

void gw__log_stop(void)
{
    pthread_mutex_lock(&lg.mu);
    if (!lg.running) {
        pthread_mutex_unlock(&lg.mu);
        return;
    }
    lg.stopping = 1;
    pthread_cond_signal(&lg.cv);
    pthread_mutex_unlock(&lg.mu);
    pthread_join(lg.thread, NULL); /* it writes what is left before it ends */
    pthread_mutex_lock(&lg.mu);
    lg.running = 0;
    pthread_mutex_unlock(&lg.mu);
    pthread_cond_destroy(&lg.cv);
}

unsigned long long gw__log_dropped(void)
{
    return atomic_load(&lg.dropped);
}

/* "YYYY-MM-DDTHH:MM:SS.mmmZ" (UTC) into buf, which holds at least 25 bytes. Every request
 * line has one, written on its loop thread: each thread formats the date and time once a
 * second and then only appends the milliseconds, which costs a tenth of gmtime_r,
 * strftime and snprintf on every line (callgrind, docs/performance.md). */
static void timestamp(char *buf)
{
    static _Thread_local time_t second = -1;
    static _Thread_local char date[24];
    static _Thread_local size_t date_len;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (ts.tv_sec != second) {
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        date_len = strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm);
        second = ts.tv_sec;
    }
    long ms = ts.tv_nsec / 1000000;
    memcpy(buf, date, date_len);
    buf[date_len] = '.';
    buf[date_len + 1] = (char)('0' + ms / 100);
    buf[date_len + 2] = (char)('0' + ms / 10 % 10);
    buf[date_len + 3] = (char)('0' + ms % 10);
    buf[date_len + 4] = 'Z';
    buf[date_len + 5] = '\0';
}

static const char *termination(enum MHD_RequestTerminationCode toe)
{
    switch (toe) {
    case MHD_REQUEST_TERMINATED_COMPLETED_OK: return NULL;
    case MHD_REQUEST_TERMINATED_WITH_ERROR: return "error";
    case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED: return "timeout";
    case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN: return "shutdown";
    case MHD_REQUEST_TERMINATED_READ_ERROR: return "client_disconnected";
    case MHD_REQUEST_TERMINATED_CLIENT_ABORT: return "client_aborted";
    default: return "unknown";
    }
}

/* One whole line: into the buffer while the flusher runs, else straight to stderr. */
static void emit(const char *line, int len)
{
    if (len <= 0) {
        return;
    }
    pthread_mutex_lock(&lg.mu);
    if (!lg.running) {
        /* Before start or after stop: one write(2) per line, in order under the mutex. */
        write_all(line, (size_t)len);
    } else if (lg.len + (size_t)len > sizeof lg.buf) {
        atomic_fetch_add(&lg.dropped, 1);
    } else {
        int wake = lg.len == 0 || (lg.len < LOG_BUF_BYTES / 2 &&
                                   lg.len + (size_t)len >= LOG_BUF_BYTES / 2);
        memcpy(lg.buf + lg.len, line, (size_t)len);
        lg.len += (size_t)len;
        if (wake) {
            pthread_cond_signal(&lg.cv);
        }
    }
    pthread_mutex_unlock(&lg.mu);
}

void gw__log_request(const gw_config *cfg, const char *method, const char *url, int status,
                     int64_t micros, enum MHD_RequestTerminationCode toe, const char *client)
{
    char ts[40];
    char line[512];
    char path[256];
    const char *end = termination(toe);
    int n = 0;

    timestamp(ts);
    gw__printable(path, sizeof path, url);
    if (cfg->log_json) {
        n = snprintf(line, sizeof line,
                     "{\"ts\":\"%s\",\"method\":\"%s\",\"path\":\"%s\",\"status\":%d,"
                     "\"duration_us\":%lld%s%s%s%s%s%s}\n",
                     ts, method, path, status, (long long)micros,
                     end != NULL ? ",\"ended\":\"" : "", end != NULL ? end : "",
                     end != NULL ? "\"" : "", client != NULL ? ",\"client\":\"" : "",
                     client != NULL ? client : "", client != NULL ? "\"" : "");
    } else {
        n = snprintf(line, sizeof line, "%s %s %s %d %lldus%s%s%s%s\n", ts, method, path,
                     status, (long long)micros, end != NULL ? " ended=" : "",
                     end != NULL ? end : "", client != NULL ? " client=" : "",
                     client != NULL ? client : "");
    }
    emit(line, n < (int)sizeof line ? n : (int)sizeof line - 1);
}

void gw__log_event(const gw_config *cfg, const char *level, const char *fmt, ...)
{
    char ts[40];
    char msg[400];
    char line[600];
    va_list ap;
    int n = 0;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    /* Messages may quote Redis or storage errors: keep them to one printable line. */
    for (char *p = msg; *p != '\0'; p++) {
        if (*p < 0x20 || *p > 0x7e || (cfg->log_json && (*p == '"' || *p == '\\'))) {
            *p = '?';
        }
    }
    timestamp(ts);
    if (cfg->log_json) {
        n = snprintf(line, sizeof line, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"%s\"}\n", ts,
                     level, msg);
    } else {
        n = snprintf(line, sizeof line, "%s %s %s\n", ts, level, msg);
    }
    emit(line, n < (int)sizeof line ? n : (int)sizeof line - 1);
}

void gw__log_mhd(void *cls, const char *fmt, va_list ap)
{
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static int64_t window_us;     /* the start of the current second */
    static int lines;             /* lines written in it */
    static long long suppressed;  /* messages dropped since the last line written */
    const gw_config *cfg = cls;
    char msg[300];

    int64_t now = gw__now_us();
    pthread_mutex_lock(&mu);
    if (now - window_us >= 1000000) {
        window_us = now;
        lines = 0;
    }
    if (lines >= GW_MHD_LOG_PER_S) {
        suppressed++;
        pthread_mutex_unlock(&mu);
        return;
    }
    lines++;
    long long dropped = suppressed;
    suppressed = 0;
    pthread_mutex_unlock(&mu);
    vsnprintf(msg, sizeof msg, fmt, ap);
    msg[strcspn(msg, "\n")] = '\0'; /* its messages end with a newline */
    if (dropped > 0) {
        gw__log_event(cfg, "warn", "libmicrohttpd: %s (and %lld more of its messages not logged)",
                      msg, dropped);
    } else {
        gw__log_event(cfg, "warn", "libmicrohttpd: %s", msg);
    }
}
