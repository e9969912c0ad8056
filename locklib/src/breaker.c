/*
 * The stall breaker shared by the handles of one process (lk_breaker_new()).
 *
 * Without it, a stalled Redis (DEBUG SLEEP, CLIENT PAUSE, SIGSTOP, a blackholed network)
 * costs every call on every handle a full command timeout, one after the other on each
 * thread: a request queued behind two others on a server thread waited three timeouts. A
 * crawling one (a network delaying every call to just under the timeout) costs as much,
 * without any call failing. With it, the first call that takes more than half the timeout
 * trips the breaker; for open_ms every call through a handle sharing it fails at once with
 * LK_EUNAVAILABLE (nothing is sent, so nothing is ambiguous); then exactly one call at a
 * time goes through as a probe while the others still fail fast. A probe that is slow again
 * re-opens the window; any other outcome (a quick reply, an error reply, a refused
 * connection) closes the breaker. Half the timeout is far above any healthy call (well under
 * a millisecond; an fsync-bound one a few), so a working Redis never trips it.
 *
 * "Slow" is measured, whatever the call returned: it needs no guessing from hiredis's error
 * strings and also covers a connect or AUTH that hangs. But a call also looks slow when this
 * process was paused while Redis answered (SIGSTOP, a frozen container or VM, starvation):
 * so a slow call that did get its reply is confirmed with a PING on the same connection,
 * allowed a tenth of the timeout, before it counts (transport.c). Only a Redis that is slow
 * now trips the breaker; a process waking from a pause does not.
 * A thread killed mid-probe cannot happen (calls always return); a probe left by a process
 * that exits takes the breaker with it.
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "breaker_internal.h"

struct lk_breaker {
    int open_ms;
    atomic_int tripped;        /* a stall was seen and no call has succeeded since */
    atomic_int probing;        /* one call is through as the probe */
    atomic_llong open_until;   /* CLOCK_MONOTONIC ms: fail fast until then */
    atomic_llong fast_fails;   /* calls refused without being sent */
};

lk_breaker *lk_breaker_new(int open_ms)
{
    if (open_ms <= 0) {
        return NULL;
    }
    lk_breaker *b = calloc(1, sizeof *b);
    if (b != NULL) {
        b->open_ms = open_ms;
    }
    return b;
}

void lk_breaker_free(lk_breaker *b)
{
    free(b);
}

long long lk_breaker_fast_fails(const lk_breaker *b)
{
    return b != NULL ? atomic_load(&((lk_breaker *)b)->fast_fails) : 0;
}

int lk__breaker_enter(lk_breaker *b, int *probe, char *err)
{
    *probe = 0;
    if (b == NULL || !atomic_load(&b->tripped)) {
        return 0;
    }
    int idle = 0;
    if (lk__now_ms() >= atomic_load(&b->open_until) &&
        atomic_compare_exchange_strong(&b->probing, &idle, 1)) {
        *probe = 1;
        return 0;
    }
    atomic_fetch_add(&b->fast_fails, 1);
    lk__errf(err, LK_EUNAVAILABLE,
             "Redis stalled past the command timeout moments ago; failing fast until it "
             "answers again");
    return -1;
}

int lk__breaker_slow(const lk_breaker *b, int connect_timeout_ms, int command_timeout_ms,
                     int64_t elapsed_ms)
{
    int timeout = command_timeout_ms < connect_timeout_ms ? command_timeout_ms
                                                          : connect_timeout_ms;
    return b != NULL && elapsed_ms * 2 >= (int64_t)timeout;
}

void lk__breaker_leave(lk_breaker *b, int probe, lk_status st, int slow)
{
    if (b == NULL) {
        return;
    }
    if (slow) {
        atomic_store(&b->open_until, lk__now_ms() + b->open_ms);
        atomic_store(&b->tripped, 1);
    } else if (st != LK_EUNAVAILABLE || probe) {
        /* A probe that failed fast (refused, -LOADING) still shows Redis is not stalled. */
        atomic_store(&b->tripped, 0);
    }
    if (probe) {
        atomic_store(&b->probing, 0);
    }
}
