/*
 * One lk_client per side-pipeline thread (pipe.c's side_kind), opened on first use and
 * closed when the thread exits: a hiredis context is not thread-safe. No loop thread calls
 * it. The pipelines and the waiters' subscriber keep their own connections.
 *
 * Why the side calls do not share the Redis pipelines' connections: they are the rare,
 * slow ones (a lock's status, the listing's whole SCAN pass, a forced release and its store
 * fence, the readiness and metrics PING). A listing of a million keys takes 0.5 to 0.7 s of
 * SCAN steps (list_bench); on a pipeline connection every /lock batched behind it would wait
 * that long. On their own connections they wait only for each other.
 */
#include <pthread.h>

#include "rt/log.h"
#include "rt/redis_client.h"

static pthread_key_t client_key;
static pthread_once_t client_once = PTHREAD_ONCE_INIT;

static void client_destroy(void *p)
{
    lk_client_close(p);
}

static void client_key_init(void)
{
    pthread_key_create(&client_key, client_destroy);
}

lk_client *gw__client(gw_rt *rt)
{
    lk_client *c = NULL;

    pthread_once(&client_once, client_key_init);
    c = pthread_getspecific(client_key);
    if (c != NULL) {
        return c;
    }
    /* EUNAVAILABLE still gives a handle: Redis being down now is not fatal, every later
     * call on this handle tries to connect again. */
    lk_status st = lk_client_open(&c, rt->cfg->redis_url, &rt->lk_opts);
    if (c == NULL) {
        gw__log_event(rt->cfg, "error", "cannot create a Redis client: %s", lk_status_str(st));
        return NULL;
    }
    pthread_setspecific(client_key, c);
    return c;
}
