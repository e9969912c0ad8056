/*
 * The HTTP event loops: --threads threads, each running one libmicrohttpd daemon of its own
 * in external-epoll mode, all on one listening socket.
 *
 * Why not libmicrohttpd's own thread pool (MHD_USE_EPOLL_INTERNAL_THREAD with
 * MHD_OPTION_THREAD_POOL_SIZE):
 *   - its epoll loop (MHD_epoll in 0.9.75) calls epoll_wait() again, with the timeout it
 *     computed while nothing was ready, whenever a call returns exactly its 128-event
 *     maximum, before it handles any of them. With edge-triggered sockets nothing is
 *     reported again, so a worker holding 128 or more connections could sleep up to the 30 s
 *     idle timeout on 128 unread requests, and a pool would need one worker per 120
 *     connections: 9 threads for the default 1,024 on any machine, each resume waking one of
 *     them. Here libmicrohttpd's epoll_wait() always has a zero timeout (MHD_run); only
 *     the poll() below sleeps, and it wakes whenever the daemon's epoll set has anything
 *     ready, so a loop may hold any number of connections.
 *   - each MHD_resume_connection() writes its worker's wake-up eventfd, once per resumed
 *     connection. Here a resume marks its loop and writes the loop's eventfd only when the
 *     mark was not already set, so one batch of answers resumed by a pipeline thread costs
 *     one wake-up per loop, not one write per request.
 * So a few loops (--threads) serve any number of connections, and a batch of answers
 * costs each loop one wake-up.
 *
 * One listening socket, many daemons: each daemon has it in its epoll set (level
 * triggered); a new connection wakes every idle loop, one accept() wins and the others get
 * EAGAIN, which libmicrohttpd ignores. Each daemon admits at most its share of
 * --max-connections (as libmicrohttpd's pool split it), so a loop at its limit stops
 * accepting while the others go on.
 *
 * Connections per address: libmicrohttpd's MHD_OPTION_PER_IP_CONNECTION_LIMIT counts per
 * daemon (a pool shares the count with its master daemon; separate daemons do not), so
 * the limit would be --threads times too loose. The count is kept here instead, in one
 * table under one mutex: the accept policy callback refuses an address at its limit, and
 * otherwise takes a place for the connection (the check and the count in one step, so two
 * loops accepting the same address at once cannot both pass at limit - 1). libmicrohttpd
 * calls the policy and then, on the same thread and with no other accept between,
 * NOTIFY_STARTED, which takes the place over (gw__loops_opened); if it fails in between (out
 * of memory, its own connection limit) no STARTED comes, and the place is given back at the
 * loop's next accept or at the end of the round.
 *
 * Failures: a loop thread that cannot poll retries (EINTR) and never exits on its own; a
 * full eventfd counter means a wake-up is pending anyway. Shutdown: gw__loops_quiesce()
 * asks each loop to quiesce its daemon on its own thread (libmicrohttpd's quiesce is not
 * safe against a concurrent MHD_run of the same daemon), then the server waits for its
 * requests, then gw__loops_join() stops the threads, and once nothing else can resume a
 * connection, gw__loops_free() stops the daemons.
 */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <search.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "rt/loops.h"

typedef struct gw_loop gw_loop;

struct gw_addr_slot {
    unsigned char key[17]; /* family, then the address (4 or 16 bytes) */
    size_t key_len;
    unsigned int count;    /* connections open or being opened from it */
    unsigned int waiting;  /* its requests that may wait (gw__loops_wait_take) */
};

struct gw_loop {
    gw_loops *ls;
    struct MHD_Daemon *daemon;
    int mhd_epfd;              /* the daemon's epoll set: readable when it has events */
    int wake;                  /* eventfd: a resume from another thread, quiesce or stop */
    atomic_int wake_pending;   /* resumed since the loop last ran its daemon */
    pthread_t thread;
    int started;
    gw_addr_slot *reserved;         /* the place the last accept took, until STARTED takes it */
};

struct gw_loops {
    unsigned int n;
    gw_loop *loops;
    unsigned int per_address;
    unsigned int waiter_share; /* the most requests of one address that may wait */
    void (*refused)(void *arg, unsigned int limit);
    void *refused_arg;
    atomic_int quiesce;
    atomic_uint quiesced;      /* loops that have quiesced their daemon */
    atomic_int stop;
    pthread_mutex_t mu;        /* peers */
    void *peers;               /* tsearch() tree of gw_addr_slot */
    struct {                   /* gw__loops_every: run by the first loop */
        void (*fn)(void *arg);
        void *arg;
        int every_ms;
        int64_t next_ms;
    } ticks[GW_LOOP_TICKS];
    unsigned int nticks;
};

static _Thread_local gw_loop *this_loop;

/* ---- Connections per address ---------------------------------------------------------- */

static int peer_cmp(const void *a, const void *b)
{
    const gw_addr_slot *x = a, *y = b;
    if (x->key_len != y->key_len) {
        return x->key_len < y->key_len ? -1 : 1;
    }
    return memcmp(x->key, y->key, x->key_len);
}

/* The key of addr; 0 for a family without addresses to count (never for TCP). */
static size_t peer_key(const struct sockaddr *addr, socklen_t len, unsigned char key[17])
{
    if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        key[0] = 4;
        memcpy(key + 1, &((const struct sockaddr_in *)addr)->sin_addr, 4);
        return 5;
    }
    if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        key[0] = 6;
        memcpy(key + 1, &((const struct sockaddr_in6 *)addr)->sin6_addr, 16);
        return 17;
    }
    return 0;
}

/* Gives back one place of p. */
static void peer_release(gw_loops *ls, gw_addr_slot *p)
{
    pthread_mutex_lock(&ls->mu);
    if (--p->count == 0) {
        tdelete(p, &ls->peers, peer_cmp);
        free(p);
    }
    pthread_mutex_unlock(&ls->mu);
}

/* A place the loop's last accept took whose connection never started. */
static void loop_unreserve(gw_loop *l)
{
    if (l->reserved != NULL) {
        peer_release(l->ls, l->reserved);
        l->reserved = NULL;
    }
}

enum MHD_Result gw__loops_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    gw_loops *ls = cls;
    gw_loop *l = this_loop;
    gw_addr_slot probe;

    if (ls->per_address == 0 || l == NULL || l->ls != ls) {
        return MHD_YES;
    }
    loop_unreserve(l);
    probe.key_len = peer_key(addr, addrlen, probe.key);
    if (probe.key_len == 0) {
        return MHD_YES;
    }
    enum MHD_Result ok = MHD_NO;
    pthread_mutex_lock(&ls->mu);
    gw_addr_slot **found = tfind(&probe, &ls->peers, peer_cmp);
    gw_addr_slot *p = found != NULL ? *found : NULL;
    if (p == NULL) {
        p = malloc(sizeof *p);
        if (p != NULL) {
            *p = probe;
            p->count = 0;
            p->waiting = 0;
            if (tsearch(p, &ls->peers, peer_cmp) == NULL) {
                free(p);
                p = NULL;
            }
        }
    }
    /* Out of memory: refused, like any connection libmicrohttpd cannot allocate. */
    if (p != NULL && p->count < ls->per_address) {
        p->count++;
        l->reserved = p;
        ok = MHD_YES;
    }
    pthread_mutex_unlock(&ls->mu);
    if (ok == MHD_NO && ls->refused != NULL) {
        ls->refused(ls->refused_arg, ls->per_address);
    }
    return ok;
}

int gw__loops_wait_take(gw_loops *ls, gw_addr_slot *p)
{
    int ok = 1;
    if (p == NULL) {
        return 1;
    }
    pthread_mutex_lock(&ls->mu);
    if (p->waiting < ls->waiter_share) {
        p->waiting++;
    } else {
        ok = 0;
    }
    pthread_mutex_unlock(&ls->mu);
    return ok;
}

void gw__loops_wait_give(gw_loops *ls, gw_addr_slot *p)
{
    if (p == NULL) {
        return;
    }
    pthread_mutex_lock(&ls->mu);
    p->waiting--;
    pthread_mutex_unlock(&ls->mu);
}

unsigned int gw__loops_waiter_share(const gw_loops *ls)
{
    return ls->waiter_share;
}

gw_addr_slot *gw__loops_opened(gw_loops *ls)
{
    gw_loop *l = this_loop;
    if (l == NULL || l->ls != ls) {
        return NULL;
    }
    gw_addr_slot *p = l->reserved;
    l->reserved = NULL;
    return p;
}

void gw__loops_closed(gw_loops *ls, gw_addr_slot *p)
{
    if (p != NULL) {
        peer_release(ls, p);
    }
}

/* ---- The loops -------------------------------------------------------------------------- */

static void loop_wake(gw_loop *l)
{
    uint64_t one = 1;
    if (write(l->wake, &one, sizeof one) < 0) {
        /* EAGAIN: the counter is full, so a wake-up is pending anyway */
    }
}

/* l ran, or is to run, MHD_resume_connection(): it runs its daemon again soon. */
static void loop_resumed(gw_loop *l)
{
    /* The loop clears the mark before it runs its daemon, which then sees every resume
     * made before the clear; a resume after it sets the mark again and wakes the loop. */
    if (!atomic_exchange(&l->wake_pending, 1) && l != this_loop) {
        loop_wake(l);
    }
}

void gw__loops_resume(gw_loops *ls, struct MHD_Connection *conn)
{
    /* Read before the resume, after which the connection may complete and be gone. */
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_DAEMON);
    struct MHD_Daemon *d = ci != NULL ? ci->daemon : NULL;
    MHD_resume_connection(conn);
    if (ls == NULL) {
        return; /* not started: nothing runs a daemon yet */
    }
    for (unsigned int i = 0; i < ls->n; i++) {
        if (d == NULL || ls->loops[i].daemon == d) {
            loop_resumed(&ls->loops[i]);
        }
    }
}

/* The daemon's open connections (libmicrohttpd cleans up closed ones first). Loop thread. */
static unsigned int open_connections(struct MHD_Daemon *d)
{
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return di != NULL ? di->num_connections : 0;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int gw__loops_every(gw_loops *ls, unsigned int period_ms, void (*tick)(void *arg), void *arg)
{
    if (ls->nticks >= GW_LOOP_TICKS) {
        return -1;
    }
    ls->ticks[ls->nticks].fn = tick;
    ls->ticks[ls->nticks].arg = arg;
    ls->ticks[ls->nticks].every_ms = period_ms > 0 ? (int)period_ms : 1;
    ls->ticks[ls->nticks].next_ms = 0; /* due at once */
    ls->nticks++;
    return 0;
}

/* On the first loop: runs each tick that is due; returns the ms until the next one is (a
 * bound on the loop's poll), or -1 when there is no tick. */
static int run_ticks(gw_loop *l)
{
    gw_loops *ls = l->ls;
    if (ls->nticks == 0 || l != &ls->loops[0]) {
        return -1;
    }
    int64_t now = mono_ms();
    int64_t soonest = INT64_MAX;
    for (unsigned int i = 0; i < ls->nticks; i++) {
        if (now >= ls->ticks[i].next_ms) {
            ls->ticks[i].fn(ls->ticks[i].arg);
            ls->ticks[i].next_ms = now + ls->ticks[i].every_ms;
        }
        if (ls->ticks[i].next_ms < soonest) {
            soonest = ls->ticks[i].next_ms;
        }
    }
    return (int)(soonest - now);
}

static void *loop_main(void *arg)
{
    gw_loop *l = arg;
    int quiesced = 0;
    unsigned int open = 0; /* the daemon's connections after its last run (only runs move it) */

    this_loop = l;
    prctl(PR_SET_NAME, "fg-http", 0, 0, 0);
    while (!atomic_load(&l->ls->stop)) {
        if (!quiesced && atomic_load(&l->ls->quiesce)) {
            MHD_quiesce_daemon(l->daemon); /* the socket stays open: http/server.c closes it */
            quiesced = 1;
            atomic_fetch_add(&l->ls->quiesced, 1);
        }
        MHD_UNSIGNED_LONG_LONG to = 0;
        int ms = -1; /* no connection has a timeout: until something happens */
        if (MHD_get_timeout(l->daemon, &to) == MHD_YES) {
            ms = to > 60000 ? 60000 : (int)to;
        }
        int tick_in = run_ticks(l);
        if (tick_in >= 0 && (ms < 0 || tick_in < ms)) {
            ms = tick_in;
        }
        if (atomic_load(&l->wake_pending)) {
            ms = 0;
        }
        if (ms != 0) {
            struct pollfd fds[2] = {{l->mhd_epfd, POLLIN, 0}, {l->wake, POLLIN, 0}};
            if (poll(fds, 2, ms) > 0 && (fds[1].revents & POLLIN)) {
                uint64_t count;
                if (read(l->wake, &count, sizeof count) < 0) {
                    /* EAGAIN: another read took it; nothing to drain */
                }
            }
        }
        atomic_store(&l->wake_pending, 0);
        MHD_run(l->daemon);
        loop_unreserve(l);
        unsigned int now_open = open_connections(l->daemon);
        if (now_open < open) {
            /* A daemon at its connection limit takes the listening socket out of its epoll
             * set, and puts it back only at the start of its next run: with nothing else to
             * wake the loop, it would never accept again. The same holds for a daemon that
             * ran out of descriptors at accept (libmicrohttpd's at_limit), but that one
             * clears only when one of its own connections closes, so such a loop accepts
             * again only then: that is why start-up lowers --max-connections to what the
             * open-file limit holds (main.c, fit_fd_limit), so the daemons' connection
             * limits come first. */
            atomic_store(&l->wake_pending, 1);
        }
        open = now_open;
    }
    return NULL;
}

gw_loops *gw__loops_new(unsigned int n, unsigned int per_address,
                        void (*refused)(void *arg, unsigned int limit), void *refused_arg,
                        char *err, size_t errlen)
{
    gw_loops *ls = calloc(1, sizeof *ls);
    if (ls == NULL || n == 0 || (ls->loops = calloc(n, sizeof *ls->loops)) == NULL) {
        snprintf(err, errlen, "out of memory");
        free(ls);
        return NULL;
    }
    ls->n = n;
    ls->per_address = per_address;
    /* An eighth of an address's connections (at least one, from 2) stays for its requests
     * that do not wait: an application whose waiters fill its share can still unlock the
     * lock they wait for, renew, and reach /healthz. */
    unsigned int reserve = per_address / 8;
    if (reserve == 0 && per_address >= 2) {
        reserve = 1;
    }
    ls->waiter_share = per_address - reserve;
    ls->refused = refused;
    ls->refused_arg = refused_arg;
    pthread_mutex_init(&ls->mu, NULL);
    for (unsigned int i = 0; i < n; i++) {
        ls->loops[i].ls = ls;
        ls->loops[i].wake = -1;
    }
    for (unsigned int i = 0; i < n; i++) {
        ls->loops[i].wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (ls->loops[i].wake < 0) {
            snprintf(err, errlen, "cannot create an eventfd: %s", strerror(errno));
            gw__loops_free(ls);
            return NULL;
        }
    }
    return ls;
}

int gw__loops_set(gw_loops *ls, unsigned int i, struct MHD_Daemon *d, char *err, size_t errlen)
{
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_EPOLL_FD);
    if (di == NULL) {
        snprintf(err, errlen, "libmicrohttpd has no epoll set for HTTP loop %u", i);
        MHD_quiesce_daemon(d);
        MHD_stop_daemon(d);
        return -1;
    }
    ls->loops[i].daemon = d;
    ls->loops[i].mhd_epfd = di->epoll_fd;
    return 0;
}

int gw__loops_start(gw_loops *ls, char *err, size_t errlen)
{
    for (unsigned int i = 0; i < ls->n; i++) {
        if (pthread_create(&ls->loops[i].thread, NULL, loop_main, &ls->loops[i]) != 0) {
            snprintf(err, errlen, "cannot start HTTP loop thread %u", i);
            atomic_store(&ls->stop, 1);
            for (unsigned int j = 0; j < i; j++) {
                loop_wake(&ls->loops[j]);
                pthread_join(ls->loops[j].thread, NULL);
                ls->loops[j].started = 0;
            }
            atomic_store(&ls->stop, 0);
            return -1;
        }
        ls->loops[i].started = 1;
    }
    return 0;
}

void gw__loops_quiesce(gw_loops *ls)
{
    atomic_store(&ls->quiesce, 1);
    for (unsigned int i = 0; i < ls->n; i++) {
        loop_wake(&ls->loops[i]);
    }
    /* A loop answers within one round: it never waits for the network but in the rare
     * calls rt/gateway.h lists, each bounded by its timeout. */
    while (atomic_load(&ls->quiesced) < ls->n) {
        struct timespec nap = {0, 1000000L};
        nanosleep(&nap, NULL);
    }
}

void gw__loops_join(gw_loops *ls)
{
    if (ls == NULL) {
        return;
    }
    atomic_store(&ls->stop, 1);
    for (unsigned int i = 0; i < ls->n; i++) {
        gw_loop *l = &ls->loops[i];
        if (l->started) {
            loop_wake(l);
            pthread_join(l->thread, NULL);
            l->started = 0;
        }
    }
}

void gw__loops_free(gw_loops *ls)
{
    if (ls == NULL) {
        return;
    }
    gw__loops_join(ls);
    for (unsigned int i = 0; i < ls->n; i++) {
        gw_loop *l = &ls->loops[i];
        loop_unreserve(l);
        if (l->daemon != NULL) {
            MHD_quiesce_daemon(l->daemon); /* else stopping it would close the shared socket */
            MHD_stop_daemon(l->daemon);    /* closes its connections: gw__loops_closed() */
            l->daemon = NULL;
        }
        if (l->wake >= 0) {
            close(l->wake);
        }
    }
    pthread_mutex_destroy(&ls->mu);
    free(ls->loops);
    free(ls);
}
