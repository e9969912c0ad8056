/*
 * Invariant 11 of the fault suite's checker (check.h): fenced transactions between accounts
 * (history.h's txn, balance and "total" lines).
 *
 * Every account's value names the transaction that wrote it, and every transaction records,
 * per account, the transaction whose value it read. A transaction that committed read each
 * account under its lock, so on each account the committed transactions form one chain:
 * from the account's final value back, each one's predecessor is the one before it, down to
 * the opening balance. From the chains:
 *   - a transaction on some accounts' chains and not on others' was half committed;
 *   - an acknowledged (200) transaction missing from a chain was lost, or a stale writer
 *     overwrote its successor's base (a lost update: the chain skips it);
 *   - a refused (409, 403) or failed (503 backend_unavailable) transaction on a chain was
 *     written after all;
 *   - a paused client's transaction (flag after_pause, sent only once another client held a
 *     newer token of one of its accounts) was acknowledged;
 *   - along a chain, each transaction's balance read equals what its predecessor wrote;
 *   - each transaction wrote the sum it read (the client's arithmetic), and the final
 *     balances add up to the total: conserved after every committed transaction.
 * Transactions whose outcome is unknown (no answer, 503 outcome_unknown) may be on the
 * chains or not, but only whole.
 *
 * One race the token check at arrival cannot close (LMDB; on PostgreSQL the commit checks the
 * shared ledger's grants) is excused (reported, not a violation): a transaction
 * whose token check passed, and whose lease then ran out while it was still in flight (the
 * gateway frozen, say), commits after the next holder, granted meanwhile, read the account:
 * that holder writes over it from the older value, with its larger token. A leg missing
 * from its chain is excused when the transaction that replaced it (on the chain, read the
 * same predecessor) had its lock on the account granted during the missing one's request.
 * What that leg moved is then lost, and the total the final balances must add up to is
 * corrected by it (each such race is reported).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define MAX_ACCOUNTS 8 /* per transaction */

typedef struct leg {
    char account[FH_FIELD_MAX];
    char pred[FH_FIELD_MAX];
    long long old_balance, new_balance, token;
    int on_chain;
} leg;

typedef struct txn {
    const fh_op *op;
    int n;
    leg legs[MAX_ACCOUNTS];
} txn;

/* Splits op's accounts and legs into t. 0, or -1 when malformed. */
static int parse_txn(const fh_op *op, txn *t)
{
    char accounts[FH_FIELD_MAX], body[FH_FIELD_MAX];
    char *save_a = NULL, *save_b = NULL;
    snprintf(accounts, sizeof accounts, "%s", op->resource);
    snprintf(body, sizeof body, "%s", op->body);
    t->op = op;
    t->n = 0;
    char *a = strtok_r(accounts, ",", &save_a);
    char *l = strtok_r(body, ";", &save_b);
    for (; a != NULL && l != NULL; a = strtok_r(NULL, ",", &save_a), l = strtok_r(NULL, ";", &save_b)) {
        if (t->n == MAX_ACCOUNTS)
            return -1;
        leg *g = &t->legs[t->n++];
        memset(g, 0, sizeof *g);
        snprintf(g->account, sizeof g->account, "%s", a);
        char *colon = strchr(l, ':');
        if (colon == NULL || sscanf(colon + 1, "%lld>%lld@%lld", &g->old_balance, &g->new_balance,
                                    &g->token) != 3)
            return -1;
        *colon = '\0';
        snprintf(g->pred, sizeof g->pred, "%s", l);
    }
    return a == NULL && l == NULL && t->n > 0 ? 0 : -1;
}

static txn *find_txn(txn *ts, size_t n, const char *id)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(ts[i].op->owner, id) == 0)
            return &ts[i];
    return NULL;
}

static leg *leg_of(txn *t, const char *account)
{
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->legs[i].account, account) == 0)
            return &t->legs[i];
    return NULL;
}

/* Walks account's chain back from its final value (balance line b), marking each leg on it.
 * Returns the final balance. */
static long long walk_chain(txn *ts, size_t n, const fh_op *b, fc_report bad, void *arg)
{
    long long balance = 0;
    char id[FH_FIELD_MAX] = "";
    if (sscanf(b->body, "%lld %159s", &balance, id) != 2) {
        bad(arg, "an account's final value is not \"BALANCE ID\"", b, NULL);
        return 0;
    }
    long long want = balance;
    for (size_t steps = 0; strcmp(id, "init") != 0; steps++) {
        txn *t = find_txn(ts, n, id);
        leg *g = t != NULL ? leg_of(t, b->resource) : NULL;
        if (g == NULL || steps > n) {
            bad(arg, "an account's chain names a transaction that did not write it", b,
                t != NULL ? t->op : NULL);
            return balance;
        }
        if (g->on_chain) {
            bad(arg, "an account's chain loops", b, t->op);
            return balance;
        }
        g->on_chain = 1;
        if (g->new_balance != want)
            bad(arg, "a balance differs from what the transaction that wrote it wrote", b, t->op);
        want = g->old_balance;
        snprintf(id, sizeof id, "%s", g->pred);
    }
    return balance;
}

/* 1 when t's leg g, missing from its account's chain, was replaced by a transaction whose
 * lock on the account was granted while t's request was in flight (see the top). */
static int excused(const fh_history *h, txn *ts, size_t n, const txn *t, const leg *g)
{
    for (size_t i = 0; i < n; i++) {
        leg *o = &ts[i] == t ? NULL : leg_of(&ts[i], g->account);
        if (o == NULL || !o->on_chain || strcmp(o->pred, g->pred) != 0)
            continue;
        for (size_t k = 0; k < h->n; k++) {
            const fh_op *l = &h->ops[k];
            if (l->kind == FH_LOCK && l->status == 200 && l->token == o->token &&
                strcmp(l->client, ts[i].op->client) == 0 &&
                strcmp(l->resource, g->account) == 0 && l->end_ns > t->op->start_ns &&
                l->end_ns < t->op->end_ns)
                return 1;
        }
    }
    return 0;
}

void fc_check_txn(const fh_history *h, fc_report bad, void *arg, fc_report note)
{
    size_t n = 0;
    long long total = -1, sum = 0, lost = 0;
    int balances = 0;
    txn *ts = calloc(h->n + 1, sizeof *ts);
    if (ts == NULL) {
        bad(arg, "out of memory", NULL, NULL);
        return;
    }
    for (size_t i = 0; i < h->n; i++) {
        const fh_op *op = &h->ops[i];
        if (op->kind == FH_MARK && strcmp(op->body, "total") == 0)
            total = op->token;
        if (op->kind != FH_TXN)
            continue;
        if (parse_txn(op, &ts[n]) != 0) {
            bad(arg, "a malformed transaction line", op, NULL);
            continue;
        }
        if (find_txn(ts, n, op->owner) != NULL)
            bad(arg, "two transactions with one id", op, find_txn(ts, n, op->owner)->op);
        long long in = 0, out = 0;
        for (int k = 0; k < ts[n].n; k++) {
            in += ts[n].legs[k].old_balance;
            out += ts[n].legs[k].new_balance;
        }
        if (in != out)
            bad(arg, "a transaction does not write the sum it read", op, NULL);
        n++;
    }
    for (size_t i = 0; i < h->n; i++) {
        const fh_op *b = &h->ops[i];
        if (b->kind != FH_BALANCE)
            continue;
        balances++;
        if (b->status != 200) {
            bad(arg, "an account could not be read after the run", b, NULL);
            continue;
        }
        sum += walk_chain(ts, n, b, bad, arg);
    }
    for (size_t i = 0; balances > 0 && i < n; i++) {
        int on = 0, off_excused = 0;
        for (int k = 0; k < ts[i].n; k++) {
            on += ts[i].legs[k].on_chain;
            off_excused += !ts[i].legs[k].on_chain && excused(h, ts, n, &ts[i], &ts[i].legs[k]);
        }
        int status = ts[i].op->status;
        if (on < ts[i].n && on + off_excused == ts[i].n && (on > 0 || status == 200)) {
            note(arg, "a transaction's lease ran out while it was in flight: the next holder, "
                      "granted meanwhile, wrote over it from the value before it",
                 ts[i].op, NULL);
            for (int k = 0; k < ts[i].n; k++) {
                const leg *g = &ts[i].legs[k];
                lost += g->on_chain ? 0 : g->new_balance - g->old_balance;
            }
            continue;
        }
        if (on > 0 && on < ts[i].n)
            bad(arg, "a transaction is half visible: some of its writes are there, some not",
                ts[i].op, NULL);
        else if (status == 200 && on == 0)
            bad(arg, "an acknowledged transaction is not in the accounts' history (lost, or "
                     "a stale writer's write replaced it)", ts[i].op, NULL);
        else if (status != 200 && !fc_maybe_made(ts[i].op) && on > 0)
            bad(arg, "a refused or failed transaction's writes are there", ts[i].op, NULL);
        if (status == 200 && (ts[i].op->flags & FH_F_AFTER_PAUSE) != 0)
            bad(arg, "a paused client's transaction was accepted after a newer grant",
                ts[i].op, NULL);
    }
    if (balances > 0 && total >= 0 && sum != total - lost) {
        char why[160];
        snprintf(why, sizeof why,
                 "the final balances add up to %lld, not the total %lld (less %lld lost to "
                 "excused races)", sum, total - lost, lost);
        bad(arg, why, NULL, NULL);
    }
    free(ts);
}
