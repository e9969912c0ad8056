/* Status strings, name validation, key names, ids, error text, the clock and the SIGPIPE
 * guard: the bottom layer (util_internal.h). */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <sys/random.h>
#include <sys/types.h>
#include <uuid/uuid.h>

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

/* Valid names contain no braces, so the tag is always well formed. */
void lk__key(char *buf, const char *resource, const char *suffix)
{
    snprintf(buf, LK__KEY_MAX, "fg:{%s}:%s", resource, suffix);
}

void lk__idem_key(char *buf, const char *resource, const char *idem_key)
{
    snprintf(buf, LK__KEY_MAX, "fg:{%s}:idem:%s", resource, idem_key);
}

lk_status lk_channel_name(const char *resource, char *buf, size_t len)
{
    if (!lk_valid_resource(resource) || buf == NULL) {
        return LK_EINVAL;
    }
    int n = snprintf(buf, len, "fg:{%s}:released", resource);
    return n >= 0 && (size_t)n < len ? LK_OK : LK_EINVAL;
}

/* lk__hold_id: a per-process random key, drawn once, mixed with a counter. */
static uint64_t hold_key;
static _Atomic uint64_t hold_count;
static pthread_once_t hold_once = PTHREAD_ONCE_INIT;

static void hold_key_draw(void)
{
    uuid_t raw;
    uuid_generate_random(raw); /* the kernel CSPRNG */
    /* Bytes 0-5 and 10-11: 64 random bits (byte 6 holds the version, byte 8 the variant). */
    memcpy(&hold_key, raw, 6);
    memcpy((unsigned char *)&hold_key + 6, raw + 10, 2);
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

/* Fills raw with 16 bytes of the kernel CSPRNG: one getrandom call (about 0.4 us here, where
 * two uuid_generate_random draws cost about 6 us: libuuid mixes in its own generator, with a
 * getpid, getuid, getppid and gettid per draw). It blocks only until the kernel's pool is first
 * seeded, at boot. Where getrandom fails (a kernel without it, a seccomp filter refusing it)
 * libuuid's draws, which then read /dev/urandom, fill it instead. */
static void random_bytes(unsigned char raw[16])
{
    size_t got = 0;
    while (got < 16) {
        ssize_t n = getrandom(raw + got, 16 - got, 0);
        if (n > 0) {
            got += (size_t)n;
        } else if (n == 0 || errno != EINTR) {
            break; /* 0 never comes for a short read; a loop on it would never end */
        }
    }
    if (got == 16) {
        return;
    }
    /* uuid_generate_random fixes six version and variant bits: the raw bytes of two draws
     * make them random again. */
    uuid_t fix;
    uuid_generate_random(raw);
    uuid_generate_random(fix);
    raw[6] = (unsigned char)((raw[6] & 0x0f) | (fix[0] & 0xf0));
    raw[8] = (unsigned char)((raw[8] & 0x3f) | (fix[1] & 0xc0));
}

char *lk_random_id(char *buf)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[16];

    random_bytes(raw);
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
