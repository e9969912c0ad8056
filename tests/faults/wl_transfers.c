/*
 * fg_workload's transfers mode (wl_transfers.h): money moved between accounts in fenced
 * transactions, for invariant 11 (check_txn.c).
 *
 * The parent opens ACCOUNTS accounts (PREFIX-acct-K) at 100 each, one write each under its
 * own lock, and marks the total. TRANSFER_CLIENTS processes then loop: pick two accounts,
 * lock both with one multi-resource /lock ("resources", waiting; recorded as one lock line
 * per account, with the request's times: wl_lock_set), read both, and move a random amount from
 * one to the other in one POST /resources with both tokens; each account's value is
 * "BALANCE ID", ID naming the transaction that wrote it. One transfer in PAUSE_ONE_IN sleeps
 * past its lease between the reads and the POST (a paused client, flag after_pause), and
 * sends it once another client has locked one of its accounts (GET /locks shows a larger
 * last_token; it gives up after SUPERSEDE_MS): the gateway must refuse the whole transfer,
 * whether or not the other client has written yet. Each transfer is one txn line (history.h), whatever its answer; the reads
 * and the /lock and /unlock calls are lock/unlock lines of their own. Once the run is over
 * (its deadline, OPS, or the stop file), the parent reads every account (balance lines),
 * retrying for up to 20 s while the gateway is unavailable.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "wl_transfers.h"

#define TRANSFER_CLIENTS 4
#define OPENING 100
#define TTL_MS 1000
#define WAIT_MS 3000
#define PAUSE_ONE_IN 8
#define SUPERSEDE_MS 5000

static void account_name(const conf *cf, int k, char *buf, size_t len)
{
    snprintf(buf, len, "%s-acct-%02d", cf->prefix, k);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* GETs an account's value into *balance and id (len bytes). Not a history line: the
 * transaction line records what was read. 0, or -1 when it could not be read. */
static int read_account(client *c, const conf *cf, const char *account, long long *balance,
                        char *id, size_t len, int *status, char *raw, size_t rawlen)
{
    fh_op op = {.wait_ms = 0};
    reply rp;
    char path[256];
    snprintf(path, sizeof path, "/resources/%s", account);
    struct curl_slist *h = wl_http_setup(c->curl, cf, &op, "GET", path, NULL, 0, &rp);
    CURLcode rc = curl_easy_perform(c->curl);
    curl_slist_free_all(h);
    wl_http_result(c->curl, rc, &op);
    *status = op.status;
    if (raw != NULL)
        snprintf(raw, rawlen, "%.*s", (int)rp.len, rp.body);
    char fmt[32];
    snprintf(fmt, sizeof fmt, "%%lld %%%zus", len - 1);
    return op.status == 200 && sscanf(rp.body, fmt, balance, id) == 2 ? 0 : -1;
}

/* 1 when GET /locks/{account} shows a token above token issued since. */
static int superseded(client *c, const conf *cf, const char *account, long long token)
{
    fh_op op = {.wait_ms = 0};
    reply rp;
    char path[256];
    long long last = 0;
    snprintf(path, sizeof path, "/locks/%s", account);
    struct curl_slist *h = wl_http_setup(c->curl, cf, &op, "GET", path, NULL, 0, &rp);
    CURLcode rc = curl_easy_perform(c->curl);
    curl_slist_free_all(h);
    wl_http_result(c->curl, rc, &op);
    json_t *root = op.status == 200 ? json_loadb(rp.body, rp.len, 0, NULL) : NULL;
    json_t *v = json_object_get(root, "last_token");
    if (json_is_integer(v))
        last = json_integer_value(v);
    json_decref(root);
    return last > token;
}

/* Waits (polling) until another client holds a newer token of account x or y; 0 when none
 * came within SUPERSEDE_MS. */
static int await_superseded(client *c, const conf *cf, const char *x, long long tx,
                            const char *y, long long ty)
{
    int64_t until = fh_now_ns() + SUPERSEDE_MS * 1000000LL;
    while (fh_now_ns() < until) {
        if (superseded(c, cf, x, tx) || superseded(c, cf, y, ty))
            return 1;
        sleep_ms(50);
    }
    return 0;
}

/* POST path with json for op; fills op's times, status and error, and the answer into rp. */
static void post(client *c, const conf *cf, fh_op *op, const char *path, const char *json,
                 reply *rp)
{
    struct curl_slist *h = wl_http_setup(c->curl, cf, op, "POST", path, json, 0, rp);
    op->start_ns = fh_now_ns();
    CURLcode rc = curl_easy_perform(c->curl);
    op->end_ns = fh_now_ns();
    curl_slist_free_all(h);
    wl_http_result(c->curl, rc, op);
    wl_parse_json(rp, op, 1);
}

/* POST /resources with the writes of json. */
static void post_txn(client *c, const conf *cf, fh_op *op, const char *json)
{
    reply rp;
    post(c, cf, op, "/resources", json, &rp);
}

/* One transfer between accounts x < y of client c. */
static void transfer(client *c, const conf *cf, int x, int y)
{
    char ax[64], ay[64], idx[64], idy[64], id[48], json[1024];
    long long bx = 0, by = 0;
    int st = 0;
    account_name(cf, x, ax, sizeof ax);
    account_name(cf, y, ay, sizeof ay);
    const char *const pair[] = {ax, ay};
    fh_op g[2];
    wl_lock_set(c, cf, pair, 2, TTL_MS, WAIT_MS, 0, NULL, g);
    fh_op gx = g[0], gy = g[1];
    if (gx.status != 200) {
        wl_back_off(&gx);
        return;
    }
    if (gy.status == 200 &&
        read_account(c, cf, ax, &bx, idx, sizeof idx, &st, NULL, 0) == 0 &&
        read_account(c, cf, ay, &by, idy, sizeof idy, &st, NULL, 0) == 0) {
        long amount = wl_rand_between(c, -10, 10);
        unsigned flags = 0;
        if (wl_rand_between(c, 1, PAUSE_ONE_IN) == 1) {
            sleep_ms(TTL_MS + 300); /* a GC pause past the lease */
            flags = FH_F_AFTER_PAUSE;
            if (!await_superseded(c, cf, ax, gx.token, ay, gy.token))
                goto unlock; /* nobody came: not a case of fencing */
        }
        snprintf(id, sizeof id, "%s-%ld", c->name, ++c->seq);
        snprintf(json, sizeof json,
                 "{\"writes\":[{\"resource\":\"%s\",\"token\":%lld,\"value\":\"%lld %s\"},"
                 "{\"resource\":\"%s\",\"token\":%lld,\"value\":\"%lld %s\"}]}",
                 ax, gx.token, bx - amount, id, ay, gy.token, by + amount, id);
        fh_op op;
        memset(&op, 0, sizeof op);
        snprintf(op.client, sizeof op.client, "%s", c->name);
        op.kind = FH_TXN;
        op.flags = flags;
        snprintf(op.resource, sizeof op.resource, "%s,%s", ax, ay);
        snprintf(op.owner, sizeof op.owner, "%s", id);
        snprintf(op.body, sizeof op.body, "%s:%lld>%lld@%lld;%s:%lld>%lld@%lld", idx, bx,
                 bx - amount, gx.token, idy, by, by + amount, gy.token);
        post_txn(c, cf, &op, json);
        wl_append_line(c->fd, &op);
        wl_back_off(&op);
    }
unlock:
    if (gy.status == 200)
        wl_owner_call(c, cf, FH_UNLOCK, &gy, 0);
    wl_owner_call(c, cf, FH_UNLOCK, &gx, 0);
}

static void transfer_client(const conf *cf, int i, int fd, uint64_t seed)
{
    client c;
    char name[16];
    snprintf(name, sizeof name, "t%d", i);
    if (wl_client_init(&c, name, fd, seed + (uint64_t)i * 7919) != 0)
        _exit(1);
    for (long k = 0; k < cf->ops && fh_now_ns() < cf->deadline &&
                     access(cf->stop_path, F_OK) != 0;
         k++) {
        int x = (int)wl_rand_between(&c, 0, cf->accounts - 1);
        int y = (int)wl_rand_between(&c, 0, cf->accounts - 2);
        y += y >= x; /* another account */
        transfer(&c, cf, x < y ? x : y, x < y ? y : x);
    }
    curl_easy_cleanup(c.curl);
    _exit(0);
}

/* Opens account k at OPENING, retrying while the gateway is not ready. 0 or -1. */
static int open_account(client *p, const conf *cf, int k)
{
    char name[64], json[256];
    account_name(cf, k, name, sizeof name);
    for (int attempt = 0; attempt < 100; attempt++) {
        fh_op g = wl_lock(p, cf, name, 10000, WAIT_MS, 0);
        if (g.status != 200) {
            sleep_ms(100);
            continue;
        }
        fh_op op = {.wait_ms = 0};
        snprintf(json, sizeof json,
                 "{\"writes\":[{\"resource\":\"%s\",\"token\":%lld,\"value\":\"%d init\"}]}",
                 name, g.token, OPENING);
        post_txn(p, cf, &op, json);
        wl_owner_call(p, cf, FH_UNLOCK, &g, 0);
        if (op.status == 200)
            return 0;
        sleep_ms(100);
    }
    fprintf(stderr, "fg_workload: could not open account %s\n", name);
    return -1;
}

/* Reads every account once the run is over: balance lines. */
static void read_balances(client *p, const conf *cf)
{
    for (int k = 0; k < cf->accounts; k++) {
        fh_op op;
        memset(&op, 0, sizeof op);
        snprintf(op.client, sizeof op.client, "final");
        op.kind = FH_BALANCE;
        account_name(cf, k, op.resource, sizeof op.resource);
        int64_t until = fh_now_ns() + 20000000000LL;
        long long balance;
        char id[64];
        do {
            op.start_ns = fh_now_ns();
            read_account(p, cf, op.resource, &balance, id, sizeof id, &op.status, op.body,
                         sizeof op.body);
            op.end_ns = fh_now_ns();
            if (op.status == 200)
                break;
            sleep_ms(200);
        } while (fh_now_ns() < until);
        wl_append_line(p->fd, &op);
    }
}

int wl_transfers_run(const conf *cf, const char *history, uint64_t seed)
{
    pid_t pids[TRANSFER_CLIENTS];
    client p;
    int fd = wl_open_history(history);
    if (fd < 0 || wl_client_init(&p, "bank", fd, seed) != 0)
        return 1;
    for (int k = 0; k < cf->accounts; k++) {
        if (open_account(&p, cf, k) != 0)
            return 1;
    }
    fh_op total;
    memset(&total, 0, sizeof total);
    snprintf(total.client, sizeof total.client, "runner");
    total.kind = FH_MARK;
    total.start_ns = total.end_ns = fh_now_ns();
    total.token = (long long)cf->accounts * OPENING;
    snprintf(total.body, sizeof total.body, "total");
    wl_append_line(fd, &total);
    for (int i = 0; i < TRANSFER_CLIENTS; i++) {
        pids[i] = fork();
        if (pids[i] < 0) {
            perror("fork");
            return 1;
        }
        if (pids[i] == 0)
            transfer_client(cf, i, fd, seed);
    }
    int rc = 0;
    for (int i = 0; i < TRANSFER_CLIENTS; i++) {
        int status = 0;
        waitpid(pids[i], &status, 0);
        rc |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    read_balances(&p, cf);
    curl_easy_cleanup(p.curl);
    close(fd);
    return rc;
}
