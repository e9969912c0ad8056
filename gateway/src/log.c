/*
 * Logging on stderr: one line per request, plus a few lines about the process itself.
 *
 * A request line holds the method, the path, the status and the duration in microseconds,
 * nothing else: never an owner (bodies are not logged at all), never a header (so neither
 * Authorization nor Idempotency-Key), never a Redis password. Paths were reduced to
 * printable ASCII without quotes or backslashes when the request arrived, so a client cannot
 * forge log lines or break the JSON format. Each line is written with one fwrite(), which
 * stdio locks, so lines from different threads never interleave.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "util.h"

static void timestamp(char *buf, size_t len)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, len - n, ".%03ldZ", ts.tv_nsec / 1000000);
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

static void emit(const char *line, int len)
{
    if (len > 0) {
        fwrite(line, 1, (size_t)len, stderr);
    }
}

void gw__log_request(const gw_config *cfg, const char *method, const char *url, int status,
                     int64_t micros, enum MHD_RequestTerminationCode toe)
{
    char ts[40];
    char line[512];
    char path[256];
    const char *end = termination(toe);
    int n = 0;

    timestamp(ts, sizeof ts);
    gw__printable(path, sizeof path, url);
    if (cfg->log_json) {
        n = snprintf(line, sizeof line,
                     "{\"ts\":\"%s\",\"method\":\"%s\",\"path\":\"%s\",\"status\":%d,"
                     "\"duration_us\":%lld%s%s%s}\n",
                     ts, method, path, status, (long long)micros,
                     end != NULL ? ",\"ended\":\"" : "", end != NULL ? end : "",
                     end != NULL ? "\"" : "");
    } else {
        n = snprintf(line, sizeof line, "%s %s %s %d %lldus%s%s\n", ts, method, path,
                     status, (long long)micros, end != NULL ? " ended=" : "",
                     end != NULL ? end : "");
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
    timestamp(ts, sizeof ts);
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
