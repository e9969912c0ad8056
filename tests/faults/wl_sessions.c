/*
 * fg_workload's sessions mode (wl_sessions.c): clients that hold their locks in sessions, for
 * the checker's invariant 14.
 *
 * Each of SESSION_CLIENTS processes runs rounds until the run is over: it creates a session
 * (lease SES_TTL_MS), takes SES_LOCKS of the shared resources PREFIX-s0..s2 in it (waiting;
 * every third round as one set, POST /lock {"resources", "session"}), writes with each
 * token, renews the session, writes again, then
 *   - in most rounds ends it (DELETE, a session_end line) and writes once more with each old
 *     token (flag stale): invariant 14 wants every such write refused;
 *   - in every fourth round leaves it to expire (no renewal, no DELETE): a gateway's reaper
 *     ends it, and its locks are released to the waiting clients.
 * Client 0 also, every fifth round from its second, forks a holder that creates a session,
 * takes the lock of PREFIX-sk (only they use it) in it and writes; then client 0 kills it
 * with SIGKILL (a holder_killed mark with the session's lease) and takes that lock itself
 * with wait_ms = lease + 3 s: the checker wants it granted (invariant 8's takeover).
 * Session ids are credentials: the history names a session only by its label.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "wl_sessions.h"

#define SESSION_CLIENTS 3
#define SES_TTL_MS 1000
#define SES_LOCKS 2
#define SES_RESOURCES 3
#define SES_WAIT_MS 2000

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* One request whose op the caller filled (kind, resource, owner, wait_ms...), recorded when
 * record is set; the answer's body goes to rp. */
static void request(client *c, const conf *cf, fh_op *op, const char *method, const char *path,
                    const char *body, reply *rp, int record)
{
    struct curl_slist *headers = wl_http_setup(c->curl, cf, op, method, path, body, 0, rp);
    op->start_ns = fh_now_ns();
    CURLcode rc = curl_easy_perform(c->curl);
    op->end_ns = fh_now_ns();
    curl_slist_free_all(headers);
    wl_http_result(c->curl, rc, op);
    wl_parse_json(rp, op, 0);
    if (record)
        wl_append_line(c->fd, op);
}

static void op_init(fh_op *op, const client *c, fh_kind kind, const char *resource)
{
    memset(op, 0, sizeof *op);
    snprintf(op->client, sizeof op->client, "%s", c->name);
    snprintf(op->resource, sizeof op->resource, "%s", resource);
    op->kind = kind;
}

/* POST /sessions: the id into id (33 bytes); 0, or -1 when none was created. */
static int create(client *c, const conf *cf, char *id)
{
    fh_op op;
    reply rp;
    char body[64];
    op_init(&op, c, FH_MARK, "-");
    snprintf(body, sizeof body, "{\"ttl_ms\":%d}", SES_TTL_MS);
    request(c, cf, &op, "POST", "/sessions", body, &rp, 0);
    json_t *root = op.status == 201 ? json_loadb(rp.body, rp.len, 0, NULL) : NULL;
    const char *got = json_string_value(json_object_get(root, "session"));
    int ok = got != NULL && strlen(got) == 32;
    if (ok)
        snprintf(id, 33, "%s", got);
    json_decref(root);
    return ok ? 0 : -1;
}

/* POST /sessions/{id}/renew or DELETE /sessions/{id}: a session_renew or session_end line
 * of label. */
static fh_op session_call(client *c, const conf *cf, const char *id, const char *label,
                          int end)
{
    fh_op op;
    reply rp;
    char path[96];
    op_init(&op, c, end ? FH_SESSION_END : FH_SESSION_RENEW, "-");
    snprintf(op.owner, sizeof op.owner, "%s", label);
    op.ttl_ms = end ? 0 : SES_TTL_MS;
    snprintf(path, sizeof path, "/sessions/%s%s", id, end ? "" : "/renew");
    request(c, cf, &op, end ? "DELETE" : "POST", path, end ? NULL : "{}", &rp, 1);
    return op;
}

/* POST /lock {resource, owner, session, wait_ms}: a lock line with body session:label. */
static fh_op lock_in(client *c, const conf *cf, const char *resource, const char *id,
                     const char *label, long wait_ms)
{
    fh_op op;
    reply rp;
    char body[512];
    op_init(&op, c, FH_LOCK, resource);
    snprintf(op.owner, sizeof op.owner, "%s-%d-%ld", c->name, (int)getpid(), ++c->seq);
    op.ttl_ms = SES_TTL_MS;
    op.wait_ms = wait_ms;
    snprintf(op.body, sizeof op.body, "session:%s", label);
    snprintf(body, sizeof body,
             "{\"resource\":\"%s\",\"owner\":\"%s\",\"session\":\"%s\",\"wait_ms\":%ld}",
             resource, op.owner, id, wait_ms);
    request(c, cf, &op, "POST", "/lock", body, &rp, 1);
    return op;
}

static void resource_name(const conf *cf, int k, char *buf, size_t len)
{
    snprintf(buf, len, "%s-s%d", cf->prefix, k);
}

/* Takes up to SES_LOCKS resources in session id, one by one or (as_set) as one set; returns
 * how many, grants in g[]. */
static int take(client *c, const conf *cf, const char *id, const char *label, int as_set,
                fh_op *g)
{
    int n = 0, first = (int)wl_rand_between(c, 0, SES_RESOURCES - 1);
    if (as_set) {
        char a[128], b[128];
        const char *const session[2] = {id, label};
        resource_name(cf, first, a, sizeof a);
        resource_name(cf, (first + 1) % SES_RESOURCES, b, sizeof b);
        const char *const pair[] = {a, b};
        wl_lock_set(c, cf, pair, 2, SES_TTL_MS, SES_WAIT_MS, 0, session, g);
        if (g[0].status == 200)
            return 2;
        wl_back_off(&g[0]);
        return 0;
    }
    for (int i = 0; i < SES_LOCKS; i++) {
        char name[128];
        resource_name(cf, (first + i) % SES_RESOURCES, name, sizeof name);
        fh_op op = lock_in(c, cf, name, id, label, SES_WAIT_MS);
        if (op.status == 200)
            g[n++] = op;
        else
            wl_back_off(&op);
    }
    return n;
}

/* The holder client 0 kills: a session, one lock in it, a write; then it tells the parent
 * through fd and waits to be killed. */
static void doomed_holder(const conf *cf, int fd, int report, uint64_t seed)
{
    client c;
    char id[33], label[48], name[128];
    if (wl_client_init(&c, "doomed", fd, seed) != 0)
        _exit(1);
    snprintf(name, sizeof name, "%s-sk", cf->prefix);
    snprintf(label, sizeof label, "doomed-%d", (int)getpid());
    if (create(&c, cf, id) == 0) {
        fh_op g = lock_in(&c, cf, name, id, label, SES_WAIT_MS);
        if (g.status == 200) {
            wl_write(&c, cf, name, g.token, g.owner, 0);
            char msg[sizeof g.owner + 1];
            snprintf(msg, sizeof msg, "%s\n", g.owner);
            if (write(report, msg, strlen(msg)) < 0)
                _exit(1);
            for (;;)
                pause();
        }
    }
    if (write(report, "-\n", 2) < 0)
        _exit(1);
    _exit(0);
}

/* Client 0's kill round: returns after the takeover (or when nothing was held). */
static void kill_round(client *c, const conf *cf, uint64_t seed)
{
    int p[2];
    char owner[FH_FIELD_MAX] = "", name[128];
    if (pipe(p) != 0)
        return;
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        doomed_holder(cf, c->fd, p[1], seed);
    }
    close(p[1]);
    ssize_t got = pid > 0 ? read(p[0], owner, sizeof owner - 1) : -1;
    close(p[0]);
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    if (got <= 1 || owner[0] == '-')
        return;
    owner[strcspn(owner, "\n")] = '\0';
    snprintf(name, sizeof name, "%s-sk", cf->prefix);
    wl_holder_mark(c->fd, name, owner, SES_TTL_MS, "holder_killed");
    fh_op g = wl_lock(c, cf, name, 5000, SES_TTL_MS + 3000, 0);
    if (g.status == 200) {
        wl_write(c, cf, name, g.token, g.owner, 0);
        wl_owner_call(c, cf, FH_UNLOCK, &g, 0);
    }
}

static void session_client(const conf *cf, int i, int fd, uint64_t seed)
{
    client c;
    char name[16];
    snprintf(name, sizeof name, "s%d", i);
    if (wl_client_init(&c, name, fd, seed * 31 + (uint64_t)i) != 0)
        _exit(1);
    for (long round = 1; fh_now_ns() < cf->deadline && access(cf->stop_path, F_OK) != 0;
         round++) {
        char id[33], label[48];
        fh_op g[SES_LOCKS];
        if (i == 0 && round % 5 == 2) {
            kill_round(&c, cf, seed + (uint64_t)round);
            continue;
        }
        if (create(&c, cf, id) != 0) {
            sleep_ms(50);
            continue;
        }
        snprintf(label, sizeof label, "%s-%d-%ld", name, (int)getpid(), round);
        int n = take(&c, cf, id, label, round % 3 == 0, g);
        for (int k = 0; k < n; k++)
            wl_write(&c, cf, g[k].resource, g[k].token, g[k].owner, 0);
        if (round % 4 == 0)
            continue; /* left to expire: a reaper ends it */
        session_call(&c, cf, id, label, 0);
        for (int k = 0; k < n; k++)
            wl_write(&c, cf, g[k].resource, g[k].token, g[k].owner, 0);
        fh_op end = session_call(&c, cf, id, label, 1);
        for (int k = 0; k < n && end.status == 200; k++)
            wl_write(&c, cf, g[k].resource, g[k].token, g[k].owner, FH_F_STALE);
    }
    curl_easy_cleanup(c.curl);
    _exit(0);
}

int wl_sessions_run(const conf *cf, int fd, uint64_t seed)
{
    pid_t pids[SESSION_CLIENTS];
    int rc = 0;
    for (int i = 0; i < SESSION_CLIENTS; i++) {
        pids[i] = fork();
        if (pids[i] < 0) {
            perror("fork");
            return 1;
        }
        if (pids[i] == 0)
            session_client(cf, i, fd, seed);
    }
    for (int i = 0; i < SESSION_CLIENTS; i++) {
        int status = 0;
        waitpid(pids[i], &status, 0);
        rc |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    return rc;
}
