/* The fault suite's invariant checker (check.h). */
#include "check.h"

#include <stdlib.h>
#include <string.h>

#define NS_PER_MS 1000000LL
#define GRACE_MS 5000 /* invariant 8: wait_ms + 5 s, and the first success after healing */
#define TAKEOVER_SLACK_MS 1000 /* a lost holder's lease: its end, then Redis expiring the key */

/* Operations of one kind, sorted by (resource, end), with running maxima per resource. */
typedef struct series {
    const fh_op **ops;
    size_t n;
    size_t *max_token;   /* index of the largest token among ops of the same resource up to i */
    size_t *max_version; /* likewise for version */
} series;

/* A window in which the gateway was frozen (marks freeze and thaw). */
typedef struct freeze {
    int64_t from_ns, to_ns;
} freeze;

typedef struct ctx {
    fh_history *h;
    const fc_options *opt;
    FILE *out;
    fc_result *res;
    freeze *freezes;
    size_t n_freezes;
} ctx;

static int by_resource_end(const void *a, const void *b)
{
    const fh_op *x = *(const fh_op *const *)a;
    const fh_op *y = *(const fh_op *const *)b;
    int c = strcmp(x->resource, y->resource);
    if (c != 0)
        return c;
    return x->end_ns < y->end_ns ? -1 : x->end_ns > y->end_ns;
}

static void describe(const ctx *c, const fh_op *op)
{
    fprintf(c->out,
            "    line %zu: %s %s %s [%lld..%lld ms] status %d%s%s token %lld version %lld"
            " owner %s%s%s\n",
            op->line, op->client, fh_kind_name(op->kind), op->resource,
            (long long)(op->start_ns / NS_PER_MS), (long long)(op->end_ns / NS_PER_MS),
            op->status, op->error[0] != '\0' ? " " : "", op->error, op->token, op->version,
            op->owner[0] != '\0' ? op->owner : "-", op->body[0] != '\0' ? " body " : "",
            op->body);
}

/* Records a violation of invariant inv, printing why and the operations involved. */
static void violation(const ctx *c, int inv, const char *why, const fh_op *a, const fh_op *b)
{
    int soft = inv == 0 || (inv == 7 && !c->opt->strict_leases) ||
               (inv == 12 && c->opt->lost_grants);
    c->res->violations[inv]++;
    if (!soft)
        c->res->hard++;
    if (c->out == NULL)
        return;
    fprintf(c->out, "%s invariant %d: %s\n", soft ? "REPORT" : "VIOLATION", inv, why);
    if (a != NULL)
        describe(c, a);
    if (b != NULL)
        describe(c, b);
}

static int series_build(series *s, const fh_history *h, int (*want)(const fh_op *))
{
    memset(s, 0, sizeof *s);
    s->ops = calloc(h->n + 1, sizeof *s->ops);
    s->max_token = calloc(h->n + 1, sizeof *s->max_token);
    s->max_version = calloc(h->n + 1, sizeof *s->max_version);
    if (s->ops == NULL || s->max_token == NULL || s->max_version == NULL)
        return -1;
    for (size_t i = 0; i < h->n; i++)
        if (want(&h->ops[i]))
            s->ops[s->n++] = &h->ops[i];
    qsort(s->ops, s->n, sizeof *s->ops, by_resource_end);
    for (size_t i = 0; i < s->n; i++) {
        int first = i == 0 || strcmp(s->ops[i - 1]->resource, s->ops[i]->resource) != 0;
        s->max_token[i] = s->max_version[i] = i;
        if (first)
            continue;
        if (s->ops[s->max_token[i - 1]]->token >= s->ops[i]->token)
            s->max_token[i] = s->max_token[i - 1];
        if (s->ops[s->max_version[i - 1]]->version >= s->ops[i]->version)
            s->max_version[i] = s->max_version[i - 1];
    }
    return 0;
}

static void series_free(series *s)
{
    free(s->ops);
    free(s->max_token);
    free(s->max_version);
}

/* The last position in s of an op of resource that ended before t_ns, or -1. */
static long series_before(const series *s, const char *resource, int64_t t_ns)
{
    size_t lo = 0, hi = s->n; /* first index not (resource, end) < (resource, t) */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(s->ops[mid]->resource, resource);
        if (c < 0 || (c == 0 && s->ops[mid]->end_ns < t_ns))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0 || strcmp(s->ops[lo - 1]->resource, resource) != 0)
        return -1;
    return (long)lo - 1;
}

/* An exclusive grant: shared ones (invariant 13) share their token and their time. */
static int is_grant(const fh_op *op)
{
    return op->kind == FH_LOCK && op->status == 200 && (op->flags & FH_F_SHARED) == 0;
}

static int is_shared_grant(const fh_op *op)
{
    return op->kind == FH_LOCK && op->status == 200 && (op->flags & FH_F_SHARED) != 0;
}

static int is_acked_write(const fh_op *op)
{
    return op->kind == FH_WRITE && op->status == 200;
}

/* No answer, or 503: the request may or may not have acted. */
static int tolerated(const fh_op *op)
{
    return op->status == 0 || op->status == 503;
}

int fc_maybe_made(const fh_op *op)
{
    return op->status == 0 || (op->status == 503 && strcmp(op->error, "outcome_unknown") == 0);
}

static int by_resource_token_owner(const void *a, const void *b)
{
    const fh_op *x = *(const fh_op *const *)a;
    const fh_op *y = *(const fh_op *const *)b;
    int c = strcmp(x->resource, y->resource);
    if (c != 0)
        return c;
    if (x->token != y->token)
        return x->token < y->token ? -1 : 1;
    return strcmp(x->owner, y->owner);
}

/* 1: one owner per (resource, token); 2: later grants get larger tokens. Sorted by resource,
 * token and owner, two owners of one token are neighbours (a herd makes tens of thousands of
 * grants on one resource: no pairwise loop). */
static void check_grants(const ctx *c, const series *grants)
{
    const fh_op **by_token = calloc(grants->n + 1, sizeof *by_token);
    if (by_token == NULL) {
        fprintf(stderr, "checker: out of memory\n");
        c->res->hard++;
    } else {
        memcpy(by_token, grants->ops, grants->n * sizeof *by_token);
        qsort(by_token, grants->n, sizeof *by_token, by_resource_token_owner);
        for (size_t i = 1; i < grants->n; i++) {
            const fh_op *a = by_token[i - 1], *b = by_token[i];
            if (strcmp(a->resource, b->resource) == 0 && a->token == b->token &&
                strcmp(a->owner, b->owner) != 0)
                violation(c, 1, "one token granted to two owners", a, b);
        }
        free(by_token);
    }
    for (size_t i = 0; i < grants->n; i++) {
        const fh_op *g = grants->ops[i];
        long k = series_before(grants, g->resource, g->start_ns);
        if (k < 0)
            continue;
        const fh_op *prev = grants->ops[grants->max_token[k]];
        if (prev->token >= g->token && strcmp(prev->owner, g->owner) != 0)
            violation(c, 2, "a grant that started after another finished got a token not above it",
                      prev, g);
    }
}

/* 3: accepted writes by version: tokens never go down, versions never repeat. */
static int by_resource_version(const void *a, const void *b)
{
    const fh_op *x = *(const fh_op *const *)a;
    const fh_op *y = *(const fh_op *const *)b;
    int c = strcmp(x->resource, y->resource);
    if (c != 0)
        return c;
    return x->version < y->version ? -1 : x->version > y->version;
}

static void check_versions(const ctx *c, const series *acked)
{
    const fh_op **v = calloc(acked->n + 1, sizeof *v);
    if (v == NULL)
        return;
    memcpy(v, acked->ops, acked->n * sizeof *v);
    qsort(v, acked->n, sizeof *v, by_resource_version);
    for (size_t i = 1; i < acked->n; i++) {
        if (strcmp(v[i - 1]->resource, v[i]->resource) != 0)
            continue;
        if (v[i - 1]->version == v[i]->version)
            violation(c, 3, "two accepted writes got the same version", v[i - 1], v[i]);
        else if (v[i - 1]->token > v[i]->token)
            violation(c, 3, "a later version was written with a smaller token", v[i - 1], v[i]);
    }
    free(v);
}

/* The op of s on w's resource with the largest token among those that ended before w
 * started, if that token is above w's; else NULL. */
static const fh_op *larger_before(const series *s, const fh_op *w)
{
    long k = series_before(s, w->resource, w->start_ns);
    if (k < 0)
        return NULL;
    const fh_op *a = s->ops[s->max_token[k]];
    return a->token > w->token ? a : NULL;
}

/* 4 and 6: stale and forged writes, and the late writes of clients whose lease was lost. A
 * grant of a larger token that finished before a late write started means the late write's
 * lease is over (tokens are minted only for a free lock), so the gateway must refuse it even
 * when that grant's holder has not written yet (it compares with the last token issued). */
static void check_write(const ctx *c, const series *grants, const series *acked,
                        const fh_op *w)
{
    if ((w->flags & FH_F_FORGED) != 0) {
        if (w->status != 403 && !tolerated(w))
            violation(c, 6, "a write with a forged token was not answered 403", w, NULL);
        return;
    }
    int late = (w->flags & (FH_F_AFTER_PAUSE | FH_F_AFTER_STEAL)) != 0;
    const fh_op *a = larger_before(acked, w);
    const fh_op *g = late ? larger_before(grants, w) : NULL;
    if ((a == NULL && g == NULL) || tolerated(w))
        return;
    if (w->status != 409 || strcmp(w->error, "stale_token") != 0) {
        violation(c, 4,
                  a != NULL ? "a write below an earlier acknowledged token was not 409 stale_token"
                            : "a late write of a client whose lease was lost was not 409 "
                              "stale_token, though a larger token's grant had finished before it",
                  a != NULL ? a : g, w);
        return;
    }
    if (!late)
        return;
    c->res->fenced++;
    if (a == NULL)
        c->res->superseded++;
}

/* 14: a write is never accepted with a token granted in shared mode: once a shared grant of
 * token T on its resource was answered before the write started, a write with a token at or
 * below T is refused (409 not_exclusive, or stale_token when it is below T). */
static void check_shared_write(const ctx *c, const series *shared, const fh_op *w)
{
    long k = w->status == 200 ? series_before(shared, w->resource, w->start_ns) : -1;
    if (k < 0)
        return;
    const fh_op *g = shared->ops[shared->max_token[k]];
    if (g->token > 0 && g->token >= w->token)
        violation(c, 15, "a write was answered 200 with a token at or below one granted in "
                  "shared mode before it started", g, w);
}

/* 10: a fenced read is refused once a grant of a larger token had been answered before it
 * started: every grant is minted (and, on a shared store, recorded in the ledger) before
 * its answer. */
static void check_fenced_read(const ctx *c, const series *grants, const fh_op *r)
{
    const fh_op *g = larger_before(grants, r);
    if (g == NULL || tolerated(r))
        return;
    if (r->status == 200) {
        violation(c, 12, "a fenced read was answered 200 after a larger token's grant was answered",
                  g, r);
        return;
    }
    if ((r->flags & (FH_F_AFTER_PAUSE | FH_F_AFTER_STEAL)) != 0 && r->status == 409 &&
        strcmp(r->error, "stale_token") == 0)
        c->res->fenced_reads++;
}

static void check_not_owner(const ctx *c, const fh_op *op)
{
    if ((op->flags & (FH_F_AFTER_PAUSE | FH_F_AFTER_STEAL)) == 0 || tolerated(op))
        return;
    if (op->status != 409 || strcmp(op->error, "not_owner") != 0)
        violation(c, 4, "a client whose lease was lost was not answered 409 not_owner", op, NULL);
}

/* The write whose bytes a read returned, or NULL. */
static const fh_op *writer_of(const fh_history *h, const fh_op *r)
{
    for (size_t i = 0; i < h->n; i++) {
        const fh_op *w = &h->ops[i];
        if (w->kind == FH_WRITE && strcmp(w->resource, r->resource) == 0 &&
            strcmp(w->body, r->body) == 0)
            return w;
    }
    return NULL;
}

/* 5: a read is never older than an acknowledged write that finished before it started. */
static void check_read(const ctx *c, const series *acked, const fh_op *r)
{
    long k = series_before(acked, r->resource, r->start_ns);
    if (r->status == 404 && k >= 0) {
        violation(c, 5, "a read found nothing after an acknowledged write",
                  acked->ops[acked->max_version[k]], r);
        return;
    }
    if (r->status != 200)
        return;
    if (k >= 0) {
        const fh_op *a = acked->ops[acked->max_version[k]];
        const fh_op *t = acked->ops[acked->max_token[k]];
        if (a->version > r->version)
            violation(c, 5, "a read returned a version older than an acknowledged write", a, r);
        if (t->token > r->token)
            violation(c, 5, "a read's token is below an acknowledged write's", t, r);
    }
    const fh_op *w = writer_of(c->h, r);
    if (w == NULL)
        violation(c, 5, "a read returned bytes nobody wrote", r, NULL);
    else if (w->status == 200 && (w->version != r->version || w->token != r->token))
        violation(c, 5, "a read's version or token differs from the write of its bytes", w, r);
    else if (w->status != 200 && !fc_maybe_made(w))
        violation(c, (w->flags & FH_F_FORGED) != 0 ? 6 : 5, "a refused write's bytes were read",
                  w, r);
}

/* The gateway's freeze windows: each freeze mark up to the next thaw mark, or up to the end
 * of time when none follows. Returns 0, or -1 when out of memory. */
static int freezes_build(ctx *c)
{
    const fh_history *h = c->h;
    c->freezes = calloc(h->n + 1, sizeof *c->freezes);
    if (c->freezes == NULL)
        return -1;
    for (size_t i = 0; i < h->n; i++) {
        const fh_op *m = &h->ops[i];
        if (m->kind != FH_MARK || strcmp(m->body, "freeze") != 0)
            continue;
        freeze *f = &c->freezes[c->n_freezes++];
        f->from_ns = m->end_ns;
        f->to_ns = INT64_MAX;
        for (size_t j = 0; j < h->n; j++) {
            const fh_op *t = &h->ops[j];
            if (t->kind == FH_MARK && strcmp(t->body, "thaw") == 0 && t->end_ns >= f->from_ns &&
                t->end_ns < f->to_ns)
                f->to_ns = t->end_ns;
        }
    }
    return 0;
}

/* How long the freeze windows that op overlaps lasted, in ns (INT64_MAX for one that never
 * thawed); 0 when it overlaps none. */
static int64_t frozen_ns(const ctx *c, const fh_op *op)
{
    int64_t sum = 0;
    for (size_t i = 0; i < c->n_freezes; i++) {
        const freeze *f = &c->freezes[i];
        if (op->start_ns >= f->to_ns || op->end_ns <= f->from_ns)
            continue;
        if (f->to_ns == INT64_MAX || sum > INT64_MAX - (f->to_ns - f->from_ns))
            return INT64_MAX;
        sum += f->to_ns - f->from_ns;
    }
    return sum;
}

/* 8: bounded answers, no 5xx but 503, and a quick first success after each heal mark. A
 * request that overlaps a freeze of the gateway may take that much longer, and its client
 * may have given up on it. */
static void check_liveness(const ctx *c, const fh_op *op)
{
    int64_t frozen = frozen_ns(c, op);
    int64_t limit_ns = ((int64_t)op->wait_ms + GRACE_MS) * NS_PER_MS;
    limit_ns = frozen > INT64_MAX - limit_ns ? INT64_MAX : limit_ns + frozen;
    if (op->status >= 500 && op->status != 503)
        violation(c, 8, "a 5xx other than 503", op, NULL);
    if (op->end_ns - op->start_ns > limit_ns)
        violation(c, 8,
                  frozen > 0 ? "a request took longer than wait_ms + 5 s + the gateway's freeze"
                             : "a request took longer than wait_ms + 5 s",
                  op, NULL);
    else if (op->status == 0 && strcmp(op->error, "curl28") == 0 && frozen == 0)
        violation(c, 8, "a request timed out without an answer", op, NULL);
}

/* 8: after a holder_killed or holder_frozen mark, the first lock request of another owner on
 * the mark's resource that started after it and waits past the dead holder's lease (mark +
 * ttl_ms + slack) must be granted. Its token (invariant 2) and its window (invariant 7) are
 * checked with every other grant. */
static void check_takeover(const ctx *c, const fh_op *m)
{
    const fh_op *next = NULL;
    for (size_t i = 0; i < c->h->n; i++) {
        const fh_op *op = &c->h->ops[i];
        if (op->kind != FH_LOCK || op->start_ns < m->end_ns ||
            strcmp(op->resource, m->resource) != 0 || strcmp(op->owner, m->owner) == 0)
            continue;
        if (next == NULL || op->start_ns < next->start_ns)
            next = op;
    }
    int64_t lease_end_ns = m->end_ns + ((int64_t)m->ttl_ms + TAKEOVER_SLACK_MS) * NS_PER_MS;
    if (next == NULL || next->start_ns + (int64_t)next->wait_ms * NS_PER_MS < lease_end_ns ||
        tolerated(next))
        return;
    if (next->status == 200)
        c->res->takeovers++;
    else
        violation(c, 8, "the lock of a killed or frozen holder was not granted to the next "
                        "owner waiting past its lease", m, next);
}

static void check_heal(const ctx *c, const fh_op *mark)
{
    const fh_op *first = NULL;
    int64_t last_start = 0;
    for (size_t i = 0; i < c->h->n; i++) {
        const fh_op *op = &c->h->ops[i];
        if (op->kind == FH_MARK || op->kind == FH_FINAL || op->kind == FH_BALANCE)
            continue;
        if (op->start_ns > last_start)
            last_start = op->start_ns;
        if (op->status == 200 && op->end_ns >= mark->end_ns &&
            (first == NULL || op->end_ns < first->end_ns))
            first = op;
    }
    int64_t limit = mark->end_ns + (int64_t)GRACE_MS * NS_PER_MS;
    if (first != NULL ? first->end_ns > limit : last_start > limit)
        violation(c, 8, "no success within 5 s after healing", mark, first);
}

/* 10: after force f (status 200, fenced_token T) answered, nothing accepts T on its resource:
 * no write with T, no renew of T, no unlock by T's holder unless it was granted again since
 * (a later grant of its own, ended before the unlock started). */
static void check_forced(const ctx *c, const series *grants, const fh_op *f)
{
    if (f->status != 200 || f->token <= 0)
        return;
    for (size_t i = 0; i < c->h->n; i++) {
        const fh_op *op = &c->h->ops[i];
        if (op->status != 200 || op->start_ns <= f->end_ns ||
            strcmp(op->resource, f->resource) != 0)
            continue;
        if ((op->kind == FH_WRITE || op->kind == FH_RENEW) && op->token == f->token) {
            violation(c, 10, op->kind == FH_WRITE
                                 ? "a write with a forcibly released token was accepted after "
                                   "the release's answer"
                                 : "a renew of a forcibly released token succeeded after the "
                                   "release's answer",
                      f, op);
        } else if (op->kind == FH_UNLOCK) {
            const fh_op *last = NULL; /* the owner's latest grant before the unlock */
            for (size_t j = 0; j < grants->n; j++) {
                const fh_op *g = grants->ops[j];
                if (strcmp(g->resource, op->resource) == 0 &&
                    strcmp(g->owner, op->owner) == 0 && g->end_ns < op->start_ns &&
                    (last == NULL || g->end_ns > last->end_ns))
                    last = g;
            }
            if (last != NULL && last->token == f->token)
                violation(c, 10, "the holder of a forcibly released token unlocked after the "
                                 "release's answer", f, op);
        }
    }
}

/* 7 (reported only unless strict): lease windows of different owners overlap, from the
 * clients' view. A window runs from the end of the grant to its start + ttl_ms, extended by
 * successful renewals and cut at the start of the owner's unlock, whatever its answer: an
 * unlock answered 503, or not at all, may have released the lock (the connection to Redis
 * died after the script ran), and its client no longer counts on the lease once it sent it. */
typedef struct window {
    const fh_op *grant;
    int64_t from_ns, to_ns;
} window;

static int by_owner(const void *a, const void *b)
{
    const window *x = a, *y = b;
    int c = strcmp(x->grant->resource, y->grant->resource);
    return c != 0 ? c : strcmp(x->grant->owner, y->grant->owner);
}

static int by_start(const void *a, const void *b)
{
    const window *x = a, *y = b;
    int c = strcmp(x->grant->resource, y->grant->resource);
    if (c != 0)
        return c;
    return x->from_ns < y->from_ns ? -1 : x->from_ns > y->from_ns;
}

/* The lease windows of grants, sorted by resource and start (free them); NULL when out of
 * memory. */
static window *windows_of(const ctx *c, const series *grants)
{
    window *w = calloc(grants->n + 1, sizeof *w);
    if (w == NULL)
        return NULL;
    for (size_t i = 0; i < grants->n; i++) {
        const fh_op *g = grants->ops[i];
        w[i].grant = g;
        w[i].from_ns = g->end_ns;
        w[i].to_ns = g->start_ns + g->ttl_ms * NS_PER_MS;
    }
    /* Sorted by (resource, owner), so each renew or unlock finds its grants by bisection. */
    qsort(w, grants->n, sizeof *w, by_owner);
    for (size_t j = 0; j < c->h->n; j++) {
        const fh_op *op = &c->h->ops[j];
        if (op->kind != FH_UNLOCK && (op->kind != FH_RENEW || op->status != 200))
            continue;
        size_t lo = 0, hi = grants->n; /* the first window not before op's (resource, owner) */
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            int d = strcmp(w[mid].grant->resource, op->resource);
            if (d < 0 || (d == 0 && strcmp(w[mid].grant->owner, op->owner) < 0))
                lo = mid + 1;
            else
                hi = mid;
        }
        for (size_t i = lo; i < grants->n && strcmp(w[i].grant->owner, op->owner) == 0 &&
                            strcmp(w[i].grant->resource, op->resource) == 0;
             i++) {
            int64_t t = op->start_ns + (op->kind == FH_RENEW ? op->ttl_ms * NS_PER_MS : 0);
            if (op->kind == FH_RENEW && t > w[i].to_ns)
                w[i].to_ns = t;
            if (op->kind == FH_UNLOCK && t < w[i].to_ns)
                w[i].to_ns = t;
        }
    }
    /* A session's renewal renews each of its locks, and its end (whatever the answer, as an
     * unlock's) ends them. */
    for (size_t j = 0; j < c->h->n; j++) {
        const fh_op *op = &c->h->ops[j];
        if ((op->kind != FH_SESSION_RENEW || op->status != 200) && op->kind != FH_SESSION_END)
            continue;
        int64_t t = op->start_ns + (op->kind == FH_SESSION_RENEW ? op->ttl_ms * NS_PER_MS : 0);
        for (size_t i = 0; i < grants->n; i++) {
            if (strncmp(w[i].grant->body, "session:", 8) != 0 ||
                strcmp(w[i].grant->body + 8, op->owner) != 0)
                continue;
            if (op->kind == FH_SESSION_RENEW && t > w[i].to_ns)
                w[i].to_ns = t;
            if (op->kind == FH_SESSION_END && t < w[i].to_ns)
                w[i].to_ns = t;
        }
    }
    /* A forced release ends its holder's lease, whoever holds it, at the latest when it
     * starts to be answered; from the start is what the holder's client can know. */
    for (size_t j = 0; j < c->h->n; j++) {
        const fh_op *f = &c->h->ops[j];
        if (f->kind != FH_FORCE || f->status != 200 || f->token <= 0)
            continue;
        for (size_t i = 0; i < grants->n; i++) {
            if (w[i].grant->token == f->token && strcmp(w[i].grant->resource, f->resource) == 0 &&
                f->start_ns < w[i].to_ns)
                w[i].to_ns = f->start_ns;
        }
    }
    qsort(w, grants->n, sizeof *w, by_start);
    return w;
}

static void check_windows(const ctx *c, const series *grants)
{
    window *w = windows_of(c, grants);
    if (w == NULL)
        return;
    /* In order of start, per resource: the window reaching furthest (a) and the furthest of
     * the other owners' (b). A window overlaps an earlier one of another owner exactly when
     * one of these two reaches past its start; comparing neighbours only would miss a long
     * lease followed by a short one of its own owner. An empty window (answered after its
     * start + ttl_ms: the client was frozen, or the answer slow, past its whole lease) is no
     * lease from the client's view and overlaps nothing. */
    const window *a = NULL, *b = NULL;
    for (size_t i = 0; i < grants->n; i++) {
        const window *x = &w[i];
        if (a != NULL && strcmp(a->grant->resource, x->grant->resource) != 0)
            a = b = NULL;
        if (x->to_ns <= x->from_ns)
            continue;
        const window *other = a != NULL && strcmp(a->grant->owner, x->grant->owner) != 0 ? a : b;
        if (other != NULL && other->to_ns > x->from_ns)
            violation(c, 7, "lease windows of two owners overlap", other->grant, x->grant);
        if (a == NULL || strcmp(a->grant->owner, x->grant->owner) == 0) {
            if (a == NULL || x->to_ns > a->to_ns)
                a = x;
        } else if (x->to_ns > a->to_ns) {
            b = a;
            a = x;
        } else if (b == NULL || x->to_ns > b->to_ns) {
            b = x;
        }
    }
    free(w);
}

/* 13: a grant of one mode whose whole request lies inside another owner's lease window of
 * the other mode: Redis granted it while that lease surely ran. Windows as for 7 (cut at
 * an unlock's start, a forced release's start; extended by renewals). */
static void grants_inside(const ctx *c, const series *grants, const window *w, size_t nw)
{
    for (size_t i = 0; i < grants->n; i++) {
        const fh_op *g = grants->ops[i];
        for (size_t j = 0; j < nw; j++) {
            const window *x = &w[j];
            if (x->from_ns > g->start_ns)
                continue;
            if (strcmp(x->grant->resource, g->resource) != 0 ||
                strcmp(x->grant->owner, g->owner) == 0 || x->to_ns <= g->end_ns)
                continue;
            violation(c, 13, "a grant was answered while another owner's lease of the other "
                      "mode ran", x->grant, g);
        }
    }
}

static void check_modes(const ctx *c, const series *excl, const series *shared)
{
    if (shared->n == 0)
        return;
    window *we = windows_of(c, excl);
    window *ws = windows_of(c, shared);
    if (we != NULL && ws != NULL) {
        grants_inside(c, excl, ws, shared->n);
        grants_inside(c, shared, we, excl->n);
    }
    free(we);
    free(ws);
}

static void txn_violation(void *arg, const char *why, const fh_op *a, const fh_op *b)
{
    violation(arg, 11, why, a, b);
}

static void session_violation(void *arg, const char *why, const fh_op *a, const fh_op *b)
{
    violation(arg, 14, why, a, b);
}

static void txn_note(void *arg, const char *why, const fh_op *a, const fh_op *b)
{
    violation(arg, 0, why, a, b);
}

long fc_check(fh_history *h, const fc_options *opt, FILE *out, fc_result *res)
{
    static const fc_options defaults = {0};
    series grants = {0}, acked = {0}, shared = {0};
    ctx c = {h, opt != NULL ? opt : &defaults, out, res, NULL, 0};

    memset(res, 0, sizeof *res);
    res->ops = (long)h->n;
    if (series_build(&grants, h, is_grant) != 0 || series_build(&acked, h, is_acked_write) != 0 ||
        series_build(&shared, h, is_shared_grant) != 0 || freezes_build(&c) != 0) {
        fprintf(stderr, "checker: out of memory\n");
        series_free(&shared);
        series_free(&grants);
        series_free(&acked);
        free(c.freezes);
        res->hard = 1;
        return res->hard;
    }
    check_grants(&c, &grants);
    check_versions(&c, &acked);
    for (size_t i = 0; i < h->n; i++) {
        const fh_op *op = &h->ops[i];
        switch (op->kind) {
        case FH_WRITE:
            check_write(&c, &grants, &acked, op);
            check_shared_write(&c, &shared, op);
            break;
        case FH_RENEW:
        case FH_UNLOCK:
            check_not_owner(&c, op);
            break;
        case FH_READ:
        case FH_FINAL:
            check_read(&c, &acked, op);
            break;
        case FH_FORCE:
            check_forced(&c, &grants, op);
            break;
        case FH_TXN:
            res->txns += op->status == 200;
            res->fenced += (op->flags & FH_F_AFTER_PAUSE) != 0 && op->status == 409 &&
                           strcmp(op->error, "stale_token") == 0;
            break;
        case FH_FENCED_READ:
            check_fenced_read(&c, &grants, op);
            break;
        case FH_MARK:
            if (strcmp(op->body, "heal") == 0)
                check_heal(&c, op);
            else if (strcmp(op->body, "holder_killed") == 0 ||
                     strcmp(op->body, "holder_frozen") == 0)
                check_takeover(&c, op);
            break;
        default:
            break;
        }
        if (op->kind != FH_MARK)
            check_liveness(&c, op);
    }
    check_windows(&c, &grants);
    check_modes(&c, &grants, &shared);
    fc_check_txn(h, txn_violation, &c, txn_note);
    fc_check_sessions(h, session_violation, &c);
    series_free(&shared);
    series_free(&grants);
    series_free(&acked);
    free(c.freezes);
    return res->hard;
}
