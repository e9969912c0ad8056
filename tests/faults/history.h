/*
 * The fault suite's operation history: one line per HTTP operation a workload client made,
 * tab-separated, written by fg_workload and read by fg_checker.
 *
 *   client kind resource start_ns end_ns status error token version owner ttl_ms wait_ms flags body
 *
 * kind is lock, unlock, renew, write, read, final (a read after the run), fenced_read (a read
 * with a Fencing-Token), mark (an event of the scenario runner, such as "heal": the fault
 * is over), force (an operator's POST /admin/release: token is the fenced_token answered, 0
 * when nothing was held), txn or balance (the transfers workload). Times are CLOCK_MONOTONIC
 * nanoseconds, shared by every process on the machine. status is the HTTP status, or 0 when
 * no answer came (the error is then "curl<N>", curl's error number). token is the token granted
 * (lock, renew), sent (write, fenced_read) or read back (Fencing-Token of a read); version is
 * the version a write answered or a read's ETag (a fenced read's too). flags is "-" or a comma-separated list: forged (a write
 * with a token never issued), stale (a write with an older token of the same client),
 * after_pause, after_steal (an operation of a client that was frozen past its lease, or
 * whose lease was deleted under it), watchdog (an operation of a holder whose lease a watchdog
 * thread renews, or a renew of that watchdog), herd (a request of the thundering herd or of
 * the holder it waits on), shared (a lock, unlock or renew of a shared hold: "mode": "shared";
 * a shared grant's token is the last exclusive one, shared by its holders). body is the bytes written or read, or "-"; for a mark, the event.
 * A mark may name a resource, an owner and a ttl_ms too (the holder_killed mark, check.h).
 *
 * Sessions (POST /lock with "session"): a lock taken in a session has body "session:LABEL",
 * LABEL the workload's name for the session (never its id, a credential), and ttl_ms the
 * session's lease. session_end: a DELETE /sessions/{id}; session_renew: a POST
 * /sessions/{id}/renew, with ttl_ms the session's lease; for both, owner is the LABEL and
 * resource "-".
 *
 * The transfers workload (wl_transfers.c) adds two kinds. txn: one POST /resources between
 * accounts; resource is the accounts, comma-separated; owner is the transaction's id; body is
 * one "PRED:OLD>NEW@TOKEN" per account, ';'-separated, in the same order: the id of the
 * transaction whose value it read (init: the opening balance), the balance it read, the
 * balance it wrote and the token it wrote with. Every account's value is "BALANCE ID".
 * balance: a read of one account after the run (resource the account, body its value), and
 * a mark "total" carries the sum of the opening balances as its token.
 */
#ifndef FG_FAULTS_HISTORY_H
#define FG_FAULTS_HISTORY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define FH_FIELD_MAX 160

typedef enum fh_kind {
    FH_LOCK,
    FH_UNLOCK,
    FH_RENEW,
    FH_WRITE,
    FH_READ,
    FH_FINAL,
    FH_MARK,
    FH_FORCE,
    FH_TXN,
    FH_BALANCE,
    FH_FENCED_READ,
    FH_SESSION_END,
    FH_SESSION_RENEW,
    FH_KIND_COUNT
} fh_kind;

enum {
    FH_F_FORGED = 1,
    FH_F_STALE = 2,
    FH_F_AFTER_PAUSE = 4,
    FH_F_AFTER_STEAL = 8,
    FH_F_WATCHDOG = 16,
    FH_F_HERD = 32,
    FH_F_SHARED = 64
};

typedef struct fh_op {
    size_t line;                   /* 1-based line in its file, for reports */
    char client[32];
    fh_kind kind;
    char resource[FH_FIELD_MAX];
    int64_t start_ns;
    int64_t end_ns;
    int status;
    char error[64];
    long long token;
    long long version;
    char owner[FH_FIELD_MAX];
    long ttl_ms;
    long wait_ms;
    unsigned flags;
    char body[FH_FIELD_MAX];
} fh_op;

typedef struct fh_history {
    fh_op *ops;
    size_t n;
    size_t cap;
} fh_history;

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t fh_now_ns(void);

const char *fh_kind_name(fh_kind kind);

/* Parses one history line (without or with its newline) into op. Returns 0, or -1 when the
 * line is malformed. */
int fh_parse(const char *line, fh_op *op);

/* Formats op as one line with its newline into buf. Returns the length, or -1 if it does not
 * fit. Tabs and newlines in text fields become spaces. */
int fh_format(const fh_op *op, char *buf, size_t len);

/* Appends op to h. Returns 0, or -1 when out of memory. */
int fh_append(fh_history *h, const fh_op *op);

/* Appends every line of the file at path. Returns 0, or -1 (with a message on stderr) when it
 * cannot be read or a line is malformed. */
int fh_load(fh_history *h, const char *path);

/* Frees h's operations; h may be reused after. */
void fh_free(fh_history *h);

#endif
