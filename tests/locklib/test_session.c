/*
 * locklib sessions (lk_session_*) against a real redis-server, then a real Redis Cluster
 * (3 masters) whose locks of one session live on different masters:
 *   - a session's locks share its lease: a renewal renews every one of them, past the
 *     lease they were granted with;
 *   - ending a session releases each lock and fences it: the token is superseded at once
 *     (a later token was burned), the next holder gets a larger one, and the session is
 *     unknown from then on;
 *   - a session bound to a client is unknown to another;
 *   - an expired session is found by lk_session_reap(), and its lapsed locks are fenced;
 *   - an ender that died (claimed, never forgotten) is taken over once its claim runs out;
 *   - a lock taken in an unknown session is refused, and one held by another owner is HELD;
 *   - a set's locks join a session all or none (lk_session_add_many);
 *   - on a Cluster a renewal reaches every master, and the end fences each lock on its own;
 *   - the watchdog keeps a watched session and its locks alive past many leases, and reports
 *     it lost (on_lost with a NULL owner) once it was ended elsewhere;
 *   - Redlock refuses sessions (EINVAL).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lk_test.h"

#define LOCKS 6

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct ses_fixture {
    th_redis redis;
    th_cluster cl;
    int cluster;
    lk_client *c;
} ses_fixture;

static int single_setup(void **state)
{
    ses_fixture *f = calloc(1, sizeof *f);
    th_redis_start(&f->redis, 0, NULL);
    f->c = lk_test_open(&f->redis, NULL);
    *state = f;
    return 0;
}

static int cluster_setup(void **state)
{
    ses_fixture *f = calloc(1, sizeof *f);
    lk_options o;
    f->cluster = 1;
    th_cluster_start(&f->cl, 3, 0, "ses-pw");
    lk_options_init(&o);
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = 2000;
    lk_status st = lk_client_open(&f->c, f->cl.url, &o);
    assert_true(f->c != NULL && st == LK_OK);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    ses_fixture *f = *state;
    lk_client_close(f->c);
    if (f->cluster) {
        th_cluster_stop(&f->cl);
    } else {
        th_redis_stop(&f->redis);
    }
    free(f);
    return 0;
}

/* The names of the locks of one test: on a Cluster they fall on more than one master. */
static void names(char (*out)[64], const char *tag)
{
    for (int i = 0; i < LOCKS; i++) {
        snprintf(out[i], 64, "%.50s.%d", res_name(tag), i);
    }
}

static void take_all(lk_client *c, const char *id, const char *client, char (*res)[64],
                     int64_t *tokens)
{
    char owner[33];
    lk_random_id(owner);
    for (int i = 0; i < LOCKS; i++) {
        lk_result r;
        assert_lk(c, lk_session_acquire(c, id, client, res[i], owner, 0, NULL, &r),
                  LK_ACQUIRED);
        tokens[i] = r.token;
    }
}

static void test_renew_keeps_every_lock(void **state)
{
    ses_fixture *f = *state;
    lk_client *c = f->c;
    char id[LK_SESSION_ID_LEN + 1], res[LOCKS][64];
    int64_t tokens[LOCKS];
    names(res, "renew");
    if (f->cluster) {
        /* The session's locks live on more than one master. */
        char key[80];
        snprintf(key, sizeof key, "{%s}", res[0]);
        int first = th_cluster_slot_owner(&f->cl, 0, th_key_slot(key, strlen(key)));
        int apart = 0;
        for (int i = 1; i < LOCKS; i++) {
            snprintf(key, sizeof key, "{%s}", res[i]);
            apart |= th_cluster_slot_owner(&f->cl, 0, th_key_slot(key, strlen(key))) != first;
        }
        assert_true(apart);
    }

    assert_lk(c, lk_session_create(c, 1000, NULL, id), LK_OK);
    assert_true(lk_valid_session(id));
    take_all(c, id, NULL, res, tokens);
    /* Three leases' worth of renewals: every lock is still the session's. */
    int64_t end = now_ms() + 3000;
    while (now_ms() < end) {
        lk_session_renewal rn;
        assert_lk(c, lk_session_renew(c, id, NULL, &rn), LK_RENEWED);
        assert_int_equal(rn.locks, LOCKS);
        assert_int_equal(rn.renewed, LOCKS);
        assert_int_equal(rn.ttl_ms, 1000);
        th_nap_ms(100);
    }
    for (int i = 0; i < LOCKS; i++) {
        lk_lock_info info;
        assert_lk(c, lk_lock_status(c, res[i], &info), LK_OK);
        assert_true(info.locked);
        assert_int_equal(info.token, tokens[i]);
    }
    lk_session_lock locks[LOCKS];
    int64_t ttl = 0, left = 0;
    size_t n = 0;
    assert_lk(c, lk_session_info(c, id, NULL, &ttl, &left, locks, LOCKS, &n), LK_OK);
    assert_int_equal(n, LOCKS);
    assert_int_equal(ttl, 1000);
    assert_true(left > 0 && left <= 1000);
    for (size_t i = 0; i < n; i++) {
        assert_true(locks[i].ttl_ms > 0 && locks[i].ttl_ms <= 1000);
    }
    lk_session_lock ended[LK_SESSION_LOCKS_MAX];
    assert_lk(c, lk_session_end(c, id, "", 0, 5000, ended, LK_SESSION_LOCKS_MAX, &n),
              LK_RELEASED);
    assert_lk(c, lk_session_forget(c, id), LK_OK);
}

static void test_end_releases_and_fences(void **state)
{
    ses_fixture *f = *state;
    lk_client *c = f->c;
    char id[LK_SESSION_ID_LEN + 1], res[LOCKS][64], other[33];
    int64_t tokens[LOCKS];
    lk_session_lock ended[LK_SESSION_LOCKS_MAX];
    size_t n = 0;
    names(res, "end");
    lk_random_id(other);

    assert_lk(c, lk_session_create(c, 30000, NULL, id), LK_OK);
    take_all(c, id, NULL, res, tokens);
    assert_lk(c, lk_session_end(c, id, "", 0, 5000, ended,
                                LK_SESSION_LOCKS_MAX, &n),
              LK_RELEASED);
    assert_int_equal(n, LOCKS);
    for (size_t i = 0; i < n; i++) {
        int j = -1;
        for (int k = 0; k < LOCKS; k++) {
            if (strcmp(ended[i].resource, res[k]) == 0) {
                j = k;
            }
        }
        assert_true(j >= 0);
        assert_int_equal(ended[i].status, LK_RELEASED);
        assert_int_equal(ended[i].token, tokens[j]);
        assert_true(ended[i].fenced_by > tokens[j]);
        /* Superseded at once, with nobody locking again. */
        int64_t base = 0, last = 0;
        int recent = 0;
        assert_lk(c, lk_token_check(c, res[j], tokens[j], &base, &last, &recent), LK_OK);
        assert_true(last > tokens[j]);
        lk_result r;
        assert_lk(c, lk_acquire(c, res[j], other, 5000, 0, NULL, &r), LK_ACQUIRED);
        assert_true(r.token > ended[i].fenced_by);
    }
    assert_lk(c, lk_session_forget(c, id), LK_OK);
    lk_session_renewal rn;
    assert_lk(c, lk_session_renew(c, id, NULL, &rn), LK_NOT_OWNER);
    int64_t ttl, left;
    assert_lk(c, lk_session_info(c, id, NULL, &ttl, &left, ended, 1, &n), LK_NOT_OWNER);
    lk_result r;
    assert_lk(c, lk_session_acquire(c, id, NULL, res_name("late"), other, 0, NULL, &r),
              LK_NOT_OWNER);
}

static void test_ending_session_is_unknown(void **state)
{
    ses_fixture *f = *state;
    lk_client *c = f->c;
    char id[LK_SESSION_ID_LEN + 1], owner[33];
    lk_session_lock ended[LK_SESSION_LOCKS_MAX];
    size_t n = 0;
    lk_result r;
    lk_random_id(owner);

    assert_lk(c, lk_session_create(c, 30000, NULL, id), LK_OK);
    assert_lk(c, lk_session_end(c, id, "", 0, 5000, ended, LK_SESSION_LOCKS_MAX, &n),
              LK_RELEASED);
    /* Begun but not forgotten: renewals and new locks are refused already. */
    assert_lk(c, lk_session_renew(c, id, NULL, NULL), LK_NOT_OWNER);
    assert_lk(c, lk_session_acquire(c, id, NULL, res_name("ending"), owner, 0, NULL, &r),
              LK_NOT_OWNER);
    lk_lock_info info;
    assert_lk(c, lk_lock_status(c, res_name("ending"), &info), LK_OK);
    assert_false(info.locked);
    assert_lk(c, lk_session_forget(c, id), LK_OK);
}

static void test_bound_to_its_client(void **state)
{
    ses_fixture *f = *state;
    lk_client *c = f->c;
    char id[LK_SESSION_ID_LEN + 1], owner[33];
    lk_session_lock ended[LK_SESSION_LOCKS_MAX];
    size_t n = 0;
    int64_t ttl, left;
    lk_result r;
    lk_random_id(owner);

    assert_lk(c, lk_session_create(c, 30000, "alice", id), LK_OK);
    assert_lk(c, lk_session_renew(c, id, "bob", NULL), LK_NOT_OWNER);
    assert_lk(c, lk_session_renew(c, id, "", NULL), LK_NOT_OWNER);
    assert_lk(c, lk_session_info(c, id, "bob", &ttl, &left, ended, 1, &n), LK_NOT_OWNER);
    assert_lk(c, lk_session_acquire(c, id, "bob", res_name("bound"), owner, 0, NULL, &r),
              LK_NOT_OWNER);
    assert_lk(c, lk_session_end(c, id, "bob", 0, 5000, ended, LK_SESSION_LOCKS_MAX, &n),
              LK_NOT_OWNER);
    assert_lk(c, lk_session_renew(c, id, "alice", NULL), LK_RENEWED);
    assert_lk(c, lk_session_end(c, id, "alice", 0, 5000, ended, LK_SESSION_LOCKS_MAX, &n),
              LK_RELEASED);
    assert_lk(c, lk_session_forget(c, id), LK_OK);
    assert_lk(c, lk_session_create(c, 99, NULL, id), LK_EINVAL);
    assert_lk(c, lk_session_renew(c, "not-a-session", NULL, NULL), LK_EINVAL);
}

/* Reaps until the session id comes up (its deadline passed), within a deadline. */
static void reap_until(lk_client *c, const char *id, int64_t claim_ms)
{
    char ids[16][LK_SESSION_ID_LEN + 1];
    int64_t end = now_ms() + 10000;
    for (;;) {
        size_t n = 0;
        assert_lk(c, lk_session_reap(c, claim_ms, ids, 16, &n), LK_OK);
        for (size_t i = 0; i < n; i++) {
            if (strcmp(ids[i], id) == 0) {
                return;
            }
        }
        assert_true(now_ms() < end);
        th_nap_ms(20);
    }
}

static void test_expired_session_is_reaped_and_fenced(void **state)
{
    ses_fixture *f = *state;
    lk_client *c = f->c;
    char id[LK_SESSION_ID_LEN + 1], res[LOCKS][64];
    int64_t tokens[LOCKS];
    lk_session_lock ended[LK_SESSION_LOCKS_MAX];
    size_t n = 0;
    names(res, "expire");

    assert_lk(c, lk_session_create(c, 300, NULL, id), LK_OK);
    take_all(c, id, NULL, res, tokens);
    reap_until(c, id, 5000);
    assert_lk(c, lk_session_renew(c, id, NULL, NULL), LK_NOT_OWNER);
    assert_lk(c, lk_session_end(c, id, NULL, 0, 5000, ended, LK_SESSION_LOCKS_MAX, &n),
              LK_RELEASED);
    assert_int_equal(n, LOCKS);
    for (size_t i = 0; i < n; i++) {
        /* Freed now or lapsed already: either way a token above it is burned. */
        assert_int_equal(ended[i].status, LK_RELEASED);
        assert_true(ended[i].fenced_by > ended[i].token);
        int64_t base = 0, last = 0;
        int recent = 0;
        assert_lk(c, lk_token_check(c, ended[i].resource, ended[i].token, &base, &last,
                                    &recent), LK_OK);
        assert_true(last > ended[i].token);
    }
    assert_lk(c, lk_session_forget(c, id), LK_OK);
}

static void test_dead_ender_is_taken_over(void **state)
{
    ses_fixture *f = *state;
    lk_client *c = f->c;
    char id[LK_SESSION_ID_LEN + 1], res[LOCKS][64];
    int64_t tokens[LOCKS];
    lk_session_lock ended[LK_SESSION_LOCKS_MAX];
    size_t n = 0;
    names(res, "takeover");

    assert_lk(c, lk_session_create(c, 30000, NULL, id), LK_OK);
    take_all(c, id, NULL, res, tokens);
    /* An ender that dies before lk_session_forget(): its claim of 200 ms runs out. */
    assert_lk(c, lk_session_end(c, id, "", 0, 200, ended, LK_SESSION_LOCKS_MAX, &n),
              LK_RELEASED);
    reap_until(c, id, 5000);
    assert_lk(c, lk_session_end(c, id, NULL, 0, 5000, ended, LK_SESSION_LOCKS_MAX, &n),
              LK_RELEASED);
    assert_int_equal(n, LOCKS);
    for (size_t i = 0; i < n; i++) {
        /* Fenced by the first ender already: nothing more to do. */
        assert_int_equal(ended[i].status, LK_NOT_OWNER);
        assert_true(ended[i].fenced_by > ended[i].token);
    }
    assert_lk(c, lk_session_forget(c, id), LK_OK);
}

static void test_held_lock_in_session(void **state)
{
    ses_fixture *f = *state;
    lk_client *c = f->c;
    char id[LK_SESSION_ID_LEN + 1], owner[33], other[33];
    const char *r1 = res_name("held");
    char name[64];
    lk_result r;
    lk_random_id(owner);
    lk_random_id(other);
    snprintf(name, sizeof name, "%s", r1);

    assert_lk(c, lk_acquire(c, name, other, 30000, 0, NULL, &r), LK_ACQUIRED);
    int64_t held = r.token;
    assert_lk(c, lk_session_create(c, 30000, NULL, id), LK_OK);
    assert_lk(c, lk_session_acquire(c, id, NULL, name, owner, 0, NULL, &r), LK_HELD);
    lk_session_lock ended[LK_SESSION_LOCKS_MAX];
    size_t n = 0;
    assert_lk(c, lk_session_end(c, id, "", 0, 5000, ended, LK_SESSION_LOCKS_MAX, &n),
              LK_RELEASED);
    assert_int_equal(n, 0);
    lk_lock_info info;
    assert_lk(c, lk_lock_status(c, name, &info), LK_OK);
    assert_true(info.locked);
    assert_int_equal(info.token, held);
    assert_lk(c, lk_session_forget(c, id), LK_OK);
}

/* A set's locks join a session in one script, all or none: a session with room for one
 * more takes neither of two, and then, with room, both; its end fences both. */
static void test_add_many_all_or_none(void **state)
{
    ses_fixture *f = *state;
    lk_client *c = f->c;
    char id[LK_SESSION_ID_LEN + 1], owner[33], key[80], out[64], a[64], b[64];
    lk_many items[2] = {{.resource = a}, {.resource = b}};
    lk_session_lock ended[LK_SESSION_LOCKS_MAX];
    int64_t ttl = 0, left = 0;
    size_t n = 0;
    lk_random_id(owner);
    snprintf(a, sizeof a, "%s", res_name("many.a"));
    snprintf(b, sizeof b, "%s", res_name("many.b"));

    assert_lk(c, lk_session_create(c, 30000, NULL, id), LK_OK);
    snprintf(key, sizeof key, "fg:{#sessions}:s:%s", id);
    th_redis_cmd(&f->redis, out, sizeof out, "EVAL %s 1 %s %d",
                 "for i = 1, tonumber(ARGV[1]) do redis.call('HSET', KEYS[1], 'x' .. i, '1') "
                 "end return 1",
                 key, LK_SESSION_LOCKS_MAX - 1);
    assert_lk(c, lk_acquire_many(c, items, 2, owner, 30000, NULL, 0), LK_ACQUIRED);
    assert_lk(c, lk_session_add_many(c, id, NULL, items, 2, owner, NULL), LK_EINVAL);
    assert_lk(c, lk_session_info(c, id, NULL, &ttl, &left, ended, 2, &n), LK_OK);
    assert_int_equal(n, 0);
    th_redis_cmd(&f->redis, out, sizeof out, "HDEL %s x1 x2", key);
    assert_lk(c, lk_session_add_many(c, id, NULL, items, 2, owner, &left), LK_OK);
    assert_true(left > 0 && left <= 30000);
    assert_lk(c, lk_session_info(c, id, NULL, &ttl, &left, ended, 2, &n), LK_OK);
    assert_int_equal(n, 2);
    assert_lk(c, lk_session_end(c, id, "", 0, 5000, ended, LK_SESSION_LOCKS_MAX, &n),
              LK_RELEASED);
    assert_int_equal(n, 2);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(ended[i].status, LK_RELEASED);
        assert_true(ended[i].fenced_by > ended[i].token);
    }
    assert_lk(c, lk_session_forget(c, id), LK_OK);
    /* An ended session takes no set. */
    assert_lk(c, lk_session_add_many(c, id, NULL, items, 2, owner, NULL), LK_NOT_OWNER);
}

static struct {
    int calls;
    char resource[64];
    int owner_null;
} lost_seen;

static void on_lost(const char *resource, const char *owner, void *userdata)
{
    (void)userdata;
    /* On the watchdog thread; read by the test only after lk_session_watch_lost() says 1,
     * which takes the watchdog's mutex after this ran. */
    lost_seen.calls++;
    snprintf(lost_seen.resource, sizeof lost_seen.resource, "%s", resource);
    lost_seen.owner_null = owner == NULL;
}

/* The watchdog keeps a session (and its locks) alive past many leases, and reports it lost
 * once somebody else ended it. */
static void test_watchdog_renews_session(void **state)
{
    ses_fixture *f = *state;
    lk_client *c = f->c;
    lk_client *w = NULL;
    lk_options o;
    char id[LK_SESSION_ID_LEN + 1], owner[33], name[64];
    lk_result r;
    lk_random_id(owner);
    snprintf(name, sizeof name, "%s", res_name("watched"));
    memset(&lost_seen, 0, sizeof lost_seen); /* the group before ran this test too */

    lk_options_init(&o);
    o.connect_timeout_ms = 1000;
    o.command_timeout_ms = 1000;
    o.on_lost = on_lost;
    assert_true(lk_client_open(&w, f->cluster ? f->cl.url : f->redis.url, &o) == LK_OK);
    assert_lk(w, lk_session_create(w, 300, "app", id), LK_OK);
    assert_lk(w, lk_session_acquire(w, id, "app", name, owner, 0, NULL, &r), LK_ACQUIRED);
    assert_lk(w, lk_session_watch(w, id, "app"), LK_OK);
    /* Five leases: without the watchdog the session and its lock would be gone. */
    int64_t end = now_ms() + 1500;
    while (now_ms() < end) {
        lk_lock_info info;
        assert_lk(c, lk_lock_status(c, name, &info), LK_OK);
        assert_true(info.locked);
        assert_int_equal(info.token, r.token);
        assert_int_equal(lk_session_watch_lost(w, id, "app"), 0);
        th_nap_ms(50);
    }
    /* Ended elsewhere (the reaper's way, any client): the watchdog finds it gone. */
    lk_session_lock ended[LK_SESSION_LOCKS_MAX];
    size_t n = 0;
    assert_lk(c, lk_session_end(c, id, NULL, 0, 5000, ended, LK_SESSION_LOCKS_MAX, &n),
              LK_RELEASED);
    assert_lk(c, lk_session_forget(c, id), LK_OK);
    end = now_ms() + 10000;
    while (!lk_session_watch_lost(w, id, "app")) {
        assert_true(now_ms() < end);
        th_nap_ms(20);
    }
    assert_int_equal(lost_seen.calls, 1);
    assert_string_equal(lost_seen.resource, id);
    assert_true(lost_seen.owner_null);
    lk_client_close(w);
}

static void test_redlock_refuses_sessions(void **state)
{
    (void)state;
    th_redis_set s;
    lk_client *c = NULL;
    char id[LK_SESSION_ID_LEN + 1];
    char url[128];
    th_redis_set_start(&s, 3, NULL);
    snprintf(url, sizeof url, "redlock://127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d",
             s.nodes[0].port, s.nodes[1].port, s.nodes[2].port);
    assert_true(lk_client_open(&c, url, NULL) == LK_OK);
    assert_lk(c, lk_session_create(c, 1000, NULL, id), LK_EINVAL);
    lk_client_close(c);
    th_redis_set_stop(&s);
}

/* A session's end leaves alone the readers that came after its hold of a lock lapsed: they
 * carry the lapsed hold's token (a shared period answers the last token minted), but their
 * hold is not the session's. The token is still fenced. */
static void test_end_leaves_later_readers(void **state)
{
    ses_fixture *f = *state;
    lk_client *c = f->c;
    char id[LK_SESSION_ID_LEN + 1], owner[33];
    const char *res = res_name("readers-after");
    lk_session_lock ended[LK_SESSION_LOCKS_MAX];
    size_t n = 0;
    lk_result r;
    lk_random_id(owner);

    assert_lk(c, lk_session_create(c, 30000, NULL, id), LK_OK);
    assert_lk(c, lk_session_acquire(c, id, NULL, res, owner, 0, NULL, &r), LK_ACQUIRED);
    int64_t token = r.token;
    /* The session's hold lapses (as when Redis lost it), and two readers come. */
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "DEL fg:{%s}:lock", res), 1);
    assert_lk(c, lk_acquire_shared(c, res, "reader-1", 30000, 0, NULL, 0, &r), LK_ACQUIRED);
    assert_int_equal(r.token, token);
    assert_lk(c, lk_acquire_shared(c, res, "reader-2", 30000, 0, NULL, 0, &r), LK_ACQUIRED);
    assert_lk(c, lk_session_end(c, id, "", 0, 5000, ended, LK_SESSION_LOCKS_MAX, &n),
              LK_RELEASED);
    assert_int_equal(n, 1);
    assert_true(ended[0].fenced_by > token);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "HEXISTS fg:{%s}:lock reader-1", res), 1);
    assert_int_equal(th_redis_cmd(&f->redis, NULL, 0, "HEXISTS fg:{%s}:lock reader-2", res), 1);
    assert_lk(c, lk_session_forget(c, id), LK_OK);
}

int main(void)
{
    const struct CMUnitTest single[] = {
        cmocka_unit_test(test_renew_keeps_every_lock),
        cmocka_unit_test(test_end_releases_and_fences),
        cmocka_unit_test(test_ending_session_is_unknown),
        cmocka_unit_test(test_bound_to_its_client),
        cmocka_unit_test(test_expired_session_is_reaped_and_fenced),
        cmocka_unit_test(test_dead_ender_is_taken_over),
        cmocka_unit_test(test_held_lock_in_session),
        cmocka_unit_test(test_add_many_all_or_none),
        cmocka_unit_test(test_watchdog_renews_session),
        cmocka_unit_test(test_redlock_refuses_sessions),
        cmocka_unit_test(test_end_leaves_later_readers),
    };
    const struct CMUnitTest cluster[] = {
        cmocka_unit_test(test_renew_keeps_every_lock),
        cmocka_unit_test(test_end_releases_and_fences),
        cmocka_unit_test(test_expired_session_is_reaped_and_fenced),
        cmocka_unit_test(test_dead_ender_is_taken_over),
        cmocka_unit_test(test_watchdog_renews_session),
    };
    int failed = cmocka_run_group_tests_name("single", single, single_setup, teardown);
    failed += cmocka_run_group_tests_name("cluster", cluster, cluster_setup, teardown);
    return failed;
}
