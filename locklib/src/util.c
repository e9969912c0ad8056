/* Status strings, name validation, key names, ids, error text, the clock and the SIGPIPE
 * guard: the bottom layer (util_internal.h). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sys/random.h>
#include <sys/types.h>

#include "util_internal.h"

static const char *const status_names[] = {
#define LK_X_NAME(name, msg) #name,
    LK_STATUS_MAP(LK_X_NAME)
#undef LK_X_NAME
};

static const char *const status_msgs[] = {
#define LK_X_MSG(name, msg) msg,
    LK_STATUS_MAP(LK_X_MSG)
#undef LK_X_MSG
};

const char *lk_status_name(lk_status st)
{
    if ((unsigned)st >= LK_STATUS_COUNT) {
        return "UNKNOWN";
    }
    return status_names[st];
}

const char *lk_status_str(lk_status st)
{
    if ((unsigned)st >= LK_STATUS_COUNT) {
        return "unknown status";
    }
    return status_msgs[st];
}

const char *lk_version(void)
{
    return LOCKLIB_VERSION;
}

int lk_valid_resource(const char *s)
{
    return fg_valid_name(s, LK_RESOURCE_MAX);
}

int lk_valid_owner(const char *s)
{
    return fg_valid_name(s, LK_OWNER_MAX);
}

int lk__valid_idem(const char *idem_key)
{
    return idem_key == NULL || lk_valid_owner(idem_key);
}

int lk__valid_lease(int64_t lease_ms)
{
    return lease_ms >= LK_LEASE_MIN_MS && lease_ms <= LK_LEASE_MAX_MS;
}

/* Writes the n parts one after another into buf (cap bytes, cap > 0), cut short and
 * NUL-terminated as snprintf would; returns the whole length. Every key of every script
 * call is built here, on the thread that sends the calls: copying the parts costs about a
 * tenth of what snprintf's parsing of "fg:{%s}:%s" does (callgrind, docs/performance.md). */
static size_t join(char *buf, size_t cap, const char *const *parts, size_t n)
{
    size_t len = 0, total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(parts[i]);
        size_t fit = l < cap - 1 - len ? l : cap - 1 - len;
        memcpy(buf + len, parts[i], fit);
        len += fit;
        total += l;
    }
    buf[len] = '\0';
    return total;
}

/* Valid names contain no braces, so the tag is always well formed. */
void lk__key(char *buf, const char *resource, const char *suffix)
{
    join(buf, LK__KEY_MAX, (const char *const[]){"fg:{", resource, "}:", suffix}, 4);
}

void lk__idem_key(char *buf, const char *resource, const char *idem_key)
{
    join(buf, LK__KEY_MAX, (const char *const[]){"fg:{", resource, "}:idem:", idem_key}, 4);
}

lk_status lk_channel_name(const char *resource, char *buf, size_t len)
{
    if (!lk_valid_resource(resource) || buf == NULL || len == 0) {
        return LK_EINVAL;
    }
    size_t n = join(buf, len, (const char *const[]){"fg:{", resource, "}:released"}, 3);
    return n < len ? LK_OK : LK_EINVAL;
}

/* Fills raw with n bytes (n <= 256) of the kernel CSPRNG: one getrandom call, which blocks
 * only until the kernel's pool is first seeded, at boot. Where getrandom is refused (a kernel
 * without it, a seccomp filter) /dev/urandom is read instead. libuuid's uuid_generate_random
 * is no substitute: it costs about 6 us and six system calls per draw, and when getrandom
 * fails with anything but ENOSYS it fills its bytes from rand() seeded with the pid, the uid
 * and the time, and says so only in a return value its public function drops. These bytes
 * make capabilities (owner and session ids), so with neither source the process aborts
 * rather than hand out guessable ones. */
static void random_bytes(unsigned char *raw, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(raw + got, n - got, 0);
        if (r > 0) {
            got += (size_t)r;
        } else if (r == 0 || errno != EINTR) {
            break; /* getrandom never answers 0 for a length above 0: no loop on it */
        }
    }
    int fd = got < n ? open("/dev/urandom", O_RDONLY | O_CLOEXEC) : -1;
    while (fd >= 0 && got < n) {
        ssize_t r = read(fd, raw + got, n - got);
        if (r > 0) {
            got += (size_t)r;
        } else if (r == 0 || errno != EINTR) {
            break;
        }
    }
    if (fd >= 0) {
        close(fd);
    }
    if (got < n) {
        fputs("locklib: no random bytes from getrandom or /dev/urandom; aborting rather than "
              "make a guessable id\n",
              stderr);
        abort();
    }
}

/* lk__hold_id: a per-process random key, drawn once, mixed with a counter. */
static uint64_t hold_key;
static _Atomic uint64_t hold_count;
static pthread_once_t hold_once = PTHREAD_ONCE_INIT;

static void hold_key_draw(void)
{
    unsigned char raw[sizeof hold_key];
    random_bytes(raw, sizeof raw);
    memcpy(&hold_key, raw, sizeof raw);
}

static void hold_key_init(void)
{
    hold_key_draw();
    /* A forked child would repeat its parent's ids: it draws a key of its own. */
    pthread_atfork(NULL, NULL, hold_key_draw);
}

void lk__hold_id(char *buf)
{
    static const char hex[] = "0123456789abcdef";

    pthread_once(&hold_once, hold_key_init);
    /* splitmix64's finaliser of key + count: a bijection of the count, so one process never
     * repeats an id (but for the 0 below); two processes (a forked child too: it draws a new
     * key) repeat one with probability about 2^-64 per pair. */
    uint64_t z = hold_key + atomic_fetch_add(&hold_count, 1) * UINT64_C(0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    z ^= z >> 31;
    if (z == 0) {
        z = 1; /* 0 reads as "no hold id" (sub.c) */
    }
    for (int i = 15; i >= 0; i--) {
        buf[i] = hex[z & 0x0f];
        z >>= 4;
    }
    buf[16] = '\0';
}

char *lk_random_id(char *buf)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[16];

    random_bytes(raw, sizeof raw);
    for (int i = 0; i < 16; i++) {
        buf[2 * i] = hex[raw[i] >> 4];
        buf[2 * i + 1] = hex[raw[i] & 0x0f];
    }
    buf[32] = '\0';
    return buf;
}

lk_status lk__verrf(char *err, lk_status st, const char *fmt, va_list ap)
{
    if (err != NULL) {
        vsnprintf(err, LK__ERR_LEN, fmt, ap);
    }
    return st;
}

lk_status lk__errf(char *err, lk_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    lk__verrf(err, st, fmt, ap);
    va_end(ap);
    return st;
}

long long lk__int_at(const redisReply *r, size_t i)
{
    if (r == NULL || r->type != REDIS_REPLY_ARRAY || i >= r->elements ||
        r->element[i]->type != REDIS_REPLY_INTEGER) {
        return 0;
    }
    return r->element[i]->integer;
}

int64_t lk__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static atomic_int sigpipe_ignored;

void lk_sigpipe_ignored(void)
{
    atomic_store_explicit(&sigpipe_ignored, 1, memory_order_relaxed);
}

void lk__sigpipe_block(lk__sigpipe *g)
{
    sigset_t pipe_set;
    sigset_t pending;

    g->skipped = atomic_load_explicit(&sigpipe_ignored, memory_order_relaxed);
    if (g->skipped) {
        return; /* a SIGPIPE the writes raise is discarded by the kernel */
    }
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &g->old);
    sigpending(&pending);
    g->was_pending = sigismember(&pending, SIGPIPE);
}

void lk__sigpipe_restore(lk__sigpipe *g)
{
    sigset_t pipe_set;
    sigset_t pending;
    struct timespec zero = {0, 0};

    if (g->skipped) {
        return;
    }
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    /* Swallow only a SIGPIPE that our own writes raised; one that was already pending
     * belongs to the application. */
    if (!g->was_pending) {
        sigpending(&pending);
        if (sigismember(&pending, SIGPIPE)) {
            while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR) {
            }
        }
    }
    pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}
