/*
 * Opening the LMDB environment, reads, listing, deletes and the token ledger.
 *
 * Crashes: LMDB is copy-on-write. A transaction's pages are written to free space, synced,
 * and only then does the meta page that points at them get written and synced (default
 * flags: no MDB_NOSYNC, MDB_NOMETASYNC or MDB_WRITEMAP). A process killed at any instruction
 * leaves either the old or the new meta page valid, so the database opens without repair
 * and holds every transaction whose commit returned, plus perhaps the one whose commit was
 * under way (never acknowledged, so keeping it breaks no promise). A killed process loses
 * nothing the kernel already has; on power loss, the meta fields LMDB switches on fit in one
 * disk sector, and the data pages they name were synced before them. Nothing is
 * acknowledged before its commit returns.
 * Disk full or an I/O error (ENOSPC, EIO from pwrite or fdatasync) makes the commit fail:
 * LMDB aborts the transaction, the meta page still names the previous state, the answer is
 * an error, and the store keeps its previous state.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "lmdb_private.h"

#define LEDGER_KEY "ledger.ceiling"
#define SECRET_KEY "owner.secret"
#define LOCK_FILE "fencegate.lock"

store_status store__mdb_status(int rc)
{
    switch (rc) {
    case MDB_SUCCESS:
        return STORE_OK;
    case MDB_NOTFOUND:
        return STORE_NOT_FOUND;
    case MDB_MAP_FULL:
        return STORE_FULL;
    case ENOMEM:
        return STORE_ENOMEM;
    default:
        return STORE_EIO;
    }
}

/* fsyncs directory dir, so the entries created in it survive a power loss. Returns 0, or -1
 * with errno set. A file system that cannot fsync a directory (EINVAL, EBADF) has nothing
 * to sync, like redis/redis src/util.c: fsyncFileDir. */
static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    int rc = fsync(fd);
    if (rc != 0 && (errno == EINVAL || errno == EBADF)) {
        rc = 0;
    }
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

/* mkdir(path), and when it created the directory, fsync its parent so the new entry is
 * durable. path is modified while the parent is synced and restored before returning.
 * Returns 0 (also when path already existed), or -1 with errno set. */
static int make_one_dir(char *path)
{
    if (mkdir(path, 0700) != 0) {
        return errno == EEXIST ? 0 : -1;
    }
    char *slash = strrchr(path, '/');
    if (slash == NULL) {
        return fsync_dir(".");
    }
    if (slash == path) {
        return fsync_dir("/");
    }
    *slash = '\0';
    int rc = fsync_dir(path);
    *slash = '/';
    return rc;
}

/* mkdir -p. Each directory it creates is made durable by an fsync of its parent, top down,
 * so a fresh data dir survives a crash. Returns 0, or -1 with errno set. */
static int make_dir(const char *dir)
{
    char path[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(path, dir, n + 1);
    while (n > 1 && path[n - 1] == '/') {
        path[--n] = '\0'; /* so that the last '/' separates the parent */
    }
    for (char *p = path + 1; *p != '\0'; p++) {
        if (*p == '/' && p[-1] != '/') {
            *p = '\0';
            int rc = make_one_dir(path);
            *p = '/';
            if (rc != 0) {
                return -1;
            }
        }
    }
    return make_one_dir(path);
}

/* Takes the data dir's lock: an exclusive, non-blocking flock on DIR/fencegate.lock, kept
 * in s->lock_fd until store_close(). LMDB lets several processes share an environment, but
 * each store raises its own ledger floor at open, so two stores on one directory could hand
 * out the same token after Redis loses its counter. flock, not fcntl: its lock belongs to
 * this open file description, so a second open of the same directory in this process is
 * refused too, and no close() of another descriptor drops it. O_CLOEXEC keeps it out of
 * programs the process executes. Returns 0, EWOULDBLOCK when the lock is held, or another
 * errno value. */
static int lock_data_dir(store__lmdb *s, const char *dir)
{
    char path[4096 + sizeof LOCK_FILE + 1];
    int n = snprintf(path, sizeof path, "%s/%s", dir, LOCK_FILE);
    if (n < 0 || (size_t)n >= sizeof path) {
        return ENAMETOOLONG;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        return errno;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int rc = errno;
        close(fd);
        return rc;
    }
    s->lock_fd = fd;
    return 0;
}

static uint64_t get_u64_val(const MDB_val *v)
{
    uint64_t x = 0;
    const unsigned char *p = v->mv_data;
    for (int i = 7; i >= 0; i--) {
        x = (x << 8) | p[i];
    }
    return x;
}

/* Writes ceiling R durably in its own transaction. */
static int put_ceiling(store__lmdb *s, uint64_t ceiling)
{
    MDB_txn *txn = NULL;
    unsigned char buf[8];
    MDB_val key = {sizeof LEDGER_KEY - 1, (void *)LEDGER_KEY};
    MDB_val val = {8, buf};
    for (int i = 0; i < 8; i++) {
        buf[i] = (unsigned char)(ceiling >> (8 * i));
    }
    int rc = mdb_txn_begin(s->env, NULL, 0, &txn);
    if (rc == 0) {
        rc = mdb_put(txn, s->meta, &key, &val, 0);
        if (rc == 0) {
            rc = mdb_txn_commit(txn);
        } else {
            mdb_txn_abort(txn);
        }
    }
    return rc;
}

/* R + step, but never above the largest token: a ceiling at or above 2^53 would read back as
 * corrupt at the next open and brick the store. R <= STORE__TOKEN_MAX and step < 2^40, so the
 * sum cannot wrap. */
static uint64_t raised_ceiling(uint64_t ceiling, uint64_t step)
{
    uint64_t next = ceiling + step;
    return next > STORE__TOKEN_MAX ? STORE__TOKEN_MAX : next;
}

/* Opens the two databases and raises the ledger: R := min(R_prev + step, the largest token),
 * durable before the store is usable. */
static int open_dbs_and_ledger(store__lmdb *s)
{
    MDB_txn *txn = NULL;
    MDB_val key = {sizeof LEDGER_KEY - 1, (void *)LEDGER_KEY};
    MDB_val val;
    uint64_t prev = 0;

    int rc = mdb_txn_begin(s->env, NULL, 0, &txn);
    if (rc != 0) {
        return rc;
    }
    rc = mdb_dbi_open(txn, "resources", MDB_CREATE, &s->resources);
    if (rc == 0) {
        rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &s->meta);
    }
    if (rc == 0) {
        rc = mdb_dbi_open(txn, "shared", MDB_CREATE, &s->shared);
    }
    if (rc == 0) {
        rc = mdb_get(txn, s->meta, &key, &val);
        if (rc == 0 && val.mv_size == 8 && get_u64_val(&val) < STORE__TOKEN_LIMIT) {
            prev = get_u64_val(&val);
        } else if (rc == MDB_NOTFOUND) {
            rc = 0;
        } else if (rc == 0) {
            rc = MDB_CORRUPTED; /* never guess a ceiling: a low guess could repeat tokens */
        }
    }
    if (rc != 0) {
        mdb_txn_abort(txn);
        return rc;
    }
    rc = mdb_txn_commit(txn);
    if (rc != 0) {
        return rc;
    }
    /* Until this commit returns, the old R is the durable one: a crash here just means the
     * next open raises from R_prev again. */
    uint64_t ceiling = raised_ceiling(prev, s->opts.ledger_step);
    rc = put_ceiling(s, ceiling);
    if (rc != 0) {
        return rc;
    }
    s->floor = prev;
    atomic_store(&s->ceiling, ceiling);
    return 0;
}

/* Creates, configures and opens s's LMDB environment in s->opts.dir, then makes the new
 * files' directory entries durable. Returns 0, or an LMDB/errno code with *what naming the
 * step that failed. s->env is left for the caller to close on error. */
static int open_env(store__lmdb *s, const char **what)
{
    int rc = mdb_env_create(&s->env);
    if (rc == 0) {
        rc = mdb_env_set_maxdbs(s->env, 4);
    }
    if (rc == 0) {
        rc = mdb_env_set_maxreaders(s->env, 1024);
    }
    if (rc == 0) {
        rc = mdb_env_set_mapsize(s->env, s->opts.map_size);
    }
    if (rc != 0) {
        *what = "configure LMDB";
        return rc;
    }
    /* MDB_NOTLS: read transactions are begun and ended per call on whatever thread the
     * gateway's pool uses, so reader slots must not be tied to threads. */
    rc = mdb_env_open(s->env, s->opts.dir, MDB_NOTLS, 0600);
    if (rc != 0) {
        *what = "open LMDB environment";
        return rc;
    }
    /* data.mdb and lock.mdb may have just been created: their entries must be durable
     * before the ledger's raise in data.mdb can count as durable. */
    if (fsync_dir(s->opts.dir) != 0) {
        *what = "sync data dir";
        return errno;
    }
    return 0;
}

/*
 * Opens the store. In this order:
 *  1. Check the options.
 *  2. Create the data dir, each new directory made durable in its parent.
 *  3. Take the data dir's lock (BUSY when someone else holds it).
 *  4. Open the LMDB environment.
 *  5. Open the databases and durably raise the ledger's ceiling.
 * On error everything taken so far is released, the environment before the lock.
 */
store_status store__lmdb_open(void **out, const store_options *opts, char *err, size_t errlen)
{
    store__lmdb *s = NULL;
    int rc = 0;
    const char *what = NULL;
    store_status st = STORE_EIO;

    *out = NULL;
    if (opts == NULL || opts->dir == NULL || opts->map_size == 0 ||
        opts->max_value_bytes == 0 || opts->max_value_bytes > UINT32_MAX ||
        opts->ledger_step == 0 || opts->ledger_step >= ((uint64_t)1 << 40)) {
        if (err != NULL) {
            snprintf(err, errlen, "invalid store options");
        }
        return STORE_INVALID;
    }
    s = calloc(1, sizeof *s);
    if (s == NULL) {
        return STORE_ENOMEM;
    }
    s->opts = *opts;
    s->lock_fd = -1;
    if (make_dir(opts->dir) != 0) {
        rc = errno;
        what = "create data dir";
        goto fail;
    }
    /* Before LMDB touches anything: the holder of the lock owns the environment. */
    rc = lock_data_dir(s, opts->dir);
    if (rc == EWOULDBLOCK) {
        st = STORE_BUSY;
        if (err != NULL) {
            snprintf(err, errlen,
                     "data dir %s is in use: another process (or store) has it open and holds "
                     "its lock file %s/" LOCK_FILE,
                     opts->dir, opts->dir);
        }
        goto fail;
    }
    if (rc != 0) {
        what = "lock data dir (" LOCK_FILE ")";
        goto fail;
    }
    rc = open_env(s, &what);
    if (rc != 0) {
        goto fail;
    }
    rc = open_dbs_and_ledger(s);
    if (rc != 0) {
        what = "open databases and raise the token ledger";
        goto fail;
    }
    pthread_mutex_init(&s->ledger_mu, NULL);
    *out = s;
    return STORE_OK;
fail:
    if (err != NULL && what != NULL) {
        snprintf(err, errlen, "%s in %s: %s", what, opts->dir, mdb_strerror(rc));
    }
    if (s->env != NULL) {
        mdb_env_close(s->env);
    }
    if (s->lock_fd >= 0) {
        close(s->lock_fd); /* after the environment: nobody else opens it while we hold it */
    }
    free(s);
    if (rc == MDB_MAP_FULL) {
        st = STORE_FULL;
    }
    return st;
}

static void lmdb_close(void *impl)
{
    store__lmdb *s = impl;
    /* Every acknowledged write is already on disk, so closing adds no sync of its own. */
    mdb_env_close(s->env);
    /* Released only once the environment is closed, so the next store finds it quiet. */
    close(s->lock_fd);
    pthread_mutex_destroy(&s->ledger_mu);
    free(s);
}

/* Reads and decodes resource's record inside txn. NOT_FOUND when there is none, EIO when its
 * bytes do not decode (a corrupt record is reported, never trusted). */
static store_status get_record(store__lmdb *s, MDB_txn *txn, const char *resource,
                               store__record *rec)
{
    MDB_val key = {strlen(resource), (void *)resource};
    MDB_val val;
    int rc = mdb_get(txn, s->resources, &key, &val);
    if (rc != 0) {
        return store__mdb_status(rc);
    }
    return store__record_decode(val.mv_data, val.mv_size, rec) == 0 ? STORE_OK : STORE_EIO;
}

/* Begins a read-only transaction in *txn and reads resource's record in it (as get_record).
 * *txn is NULL when it could not begin; otherwise the caller aborts it once done with rec,
 * whose bytes live in the transaction's pages. */
static store_status read_record(store__lmdb *s, const char *resource, MDB_txn **txn,
                                store__record *rec)
{
    int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, txn);
    if (rc != 0) {
        *txn = NULL;
        return store__mdb_status(rc);
    }
    return get_record(s, *txn, resource, rec);
}

static store_status lmdb_read(void *impl, const char *resource, store_value *v)
{
    MDB_txn *txn = NULL;
    store__record rec;

    store_status st = read_record(impl, resource, &txn, &rec);
    if (txn == NULL) {
        return st;
    }
    if (st == STORE_OK && rec.deleted) {
        st = STORE_NOT_FOUND;
    }
    if (st == STORE_OK) {
        /* Copy out before the transaction ends: LMDB's pages are only valid inside it. */
        v->data = malloc(rec.len > 0 ? rec.len : 1);
        if (v->data == NULL) {
            st = STORE_ENOMEM;
        } else {
            memcpy(v->data, rec.data, rec.len);
            v->len = rec.len;
            memcpy(v->content_type, rec.content_type, sizeof v->content_type);
            v->token = rec.token;
            v->highest_token = rec.highest_token;
            v->version = rec.version;
            v->written_at_ms = rec.written_at_ms;
        }
    }
    mdb_txn_abort(txn);
    return st;
}

static store_status lmdb_highest(void *impl, const char *resource, uint64_t *highest)
{
    MDB_txn *txn = NULL;
    store__record rec;

    store_status st = read_record(impl, resource, &txn, &rec);
    if (txn == NULL) {
        return st;
    }
    mdb_txn_abort(txn);
    if (st == STORE_NOT_FOUND) {
        return STORE_OK;
    }
    if (st == STORE_OK) {
        *highest = rec.highest_token;
    }
    return st;
}

static store_status lmdb_list(void *impl, const char *after, store_entry *entries, size_t max,
                              size_t *n)
{
    store__lmdb *s = impl;
    MDB_txn *txn = NULL;
    MDB_cursor *cur = NULL;
    MDB_val key = {0, NULL};
    MDB_val val;
    store_status st = STORE_OK;

    int rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn);
    if (rc == 0) {
        rc = mdb_cursor_open(txn, s->resources, &cur);
    }
    if (rc != 0) {
        if (txn != NULL) {
            mdb_txn_abort(txn);
        }
        return store__mdb_status(rc);
    }
    if (after != NULL && after[0] != '\0') {
        key.mv_size = strlen(after);
        key.mv_data = (void *)after;
        rc = mdb_cursor_get(cur, &key, &val, MDB_SET_RANGE);
        if (rc == 0 && key.mv_size == strlen(after) &&
            memcmp(key.mv_data, after, key.mv_size) == 0) {
            rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT);
        }
    } else {
        rc = mdb_cursor_get(cur, &key, &val, MDB_FIRST);
    }
    while (rc == 0 && *n < max) {
        store__record rec;
        store_entry *e = &entries[*n];
        if (key.mv_size >= sizeof e->resource ||
            store__record_decode(val.mv_data, val.mv_size, &rec) != 0) {
            st = STORE_EIO;
            break;
        }
        memcpy(e->resource, key.mv_data, key.mv_size);
        e->resource[key.mv_size] = '\0';
        e->highest_token = rec.highest_token;
        e->version = rec.version;
        e->size = rec.len;
        e->deleted = rec.deleted;
        (*n)++;
        rc = mdb_cursor_get(cur, &key, &val, MDB_NEXT);
    }
    if (st == STORE_OK && rc != 0 && rc != MDB_NOTFOUND) {
        st = store__mdb_status(rc);
    }
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
    return st;
}

/* A record change for rewrite(): OK to write *rec back, NOT_FOUND/other to abort with that
 * answer, or STORE_STALE when there is nothing to change (answered OK). found is 0 when the
 * resource has no record (*rec is then zeroed). */
typedef store_status (*record_change)(store__record *rec, int found, uint64_t arg);

/* Reads resource's record, changes it and writes it back in its own write transaction:
 * LMDB's writer lock orders it with the group-commit batches, and the commit syncs before
 * the answer, like a write. */
static store_status rewrite(store__lmdb *s, const char *resource, record_change change,
                            uint64_t arg)
{
    MDB_txn *txn = NULL;
    store__record rec;
    unsigned char *buf = NULL;

    int rc = mdb_txn_begin(s->env, NULL, 0, &txn);
    if (rc != 0) {
        return store__mdb_status(rc);
    }
    store_status st = get_record(s, txn, resource, &rec);
    int found = st == STORE_OK;
    if (st == STORE_NOT_FOUND) {
        memset(&rec, 0, sizeof rec);
        st = STORE_OK;
    }
    if (st == STORE_OK) {
        st = change(&rec, found, arg);
    }
    if (st == STORE_OK) {
        size_t size = store__record_size(&rec);
        buf = malloc(size);
        if (buf == NULL) {
            st = STORE_ENOMEM;
        } else {
            store__record_encode(&rec, buf); /* copies the value out of the map first */
            MDB_val key = {strlen(resource), (void *)resource};
            MDB_val val = {size, buf};
            st = store__mdb_status(mdb_put(txn, s->resources, &key, &val, 0));
        }
    }
    if (st == STORE_OK) {
        st = store__mdb_status(mdb_txn_commit(txn));
    } else {
        mdb_txn_abort(txn);
    }
    free(buf);
    return st == STORE_STALE ? STORE_OK : st;
}

/* The tombstone keeps highest_token: no token below it can ever write again. */
static store_status make_tombstone(store__record *rec, int found, uint64_t arg)
{
    (void)arg;
    if (!found || rec->deleted) {
        return STORE_NOT_FOUND;
    }
    rec->deleted = 1;
    rec->data = NULL;
    rec->len = 0;
    rec->version++;
    rec->written_at_ms = store__wall_ms();
    return STORE_OK;
}

static store_status lmdb_delete(void *impl, const char *resource)
{
    return rewrite(impl, resource, make_tombstone, 0);
}

/* store_fence(): the highest token goes up to token, the value stays (a tombstone when there
 * was none). */
static store_status raise_highest(store__record *rec, int found, uint64_t token)
{
    if (!found) {
        rec->deleted = 1;
        rec->written_at_ms = store__wall_ms();
    } else if (rec->highest_token >= token) {
        return STORE_STALE; /* fenced at or above it already */
    }
    rec->highest_token = token;
    return STORE_OK;
}

static store_status lmdb_fence(void *impl, const char *resource, uint64_t token)
{
    return rewrite(impl, resource, raise_highest, token);
}

/*
 * The token ledger, and why it keeps its three promises, P1 to P3:
 *  - Every token the gateway hands out is <= the durable ceiling R at that moment
 *    (store_ledger_cover runs before the answer is sent, and raises R durably if needed).
 *  - At open, R_prev is the last durable R, so R_prev >= every token any earlier process
 *    handed out; the new process makes R_prev + step durable before serving.
 *  - The gateway passes acquisitions floor >= max(R_prev, the largest token it handed out
 *    itself, the highest token stored for the resource). So even if Redis lost its counter
 *    (restart without AOF, truncated AOF, failover, FLUSHALL), the next token is above every
 *    token handed out before, by this process or any earlier one: P1 (no token twice) and
 *    P2 (later acquisitions get larger tokens). P3 (storage never accepts a lower token
 *    than one it accepted) is the write check itself, on durable state.
 *  - A crash between raising R and handing out a token only wastes token numbers. A crash
 *    before the raise's commit returned leaves the old R durable, and no token above it was
 *    handed out (cover had not returned). A failed raise (EIO, disk full, full map) returns
 *    EIO and the gateway does not hand the token out.
 *  - R never goes down: every put_ceiling() writes a value at or above the durable one, under
 *    ledger_mu. It stops at the largest token (2^53 - 1); once there, the token space is
 *    used up and locklib refuses to hand out more, so nothing above R is ever handed out.
 */
static uint64_t lmdb_ledger_floor(void *impl)
{
    store__lmdb *s = impl;
    return s->floor;
}

static uint64_t lmdb_ledger_ceiling(void *impl)
{
    store__lmdb *s = impl;
    return atomic_load(&s->ceiling);
}

/* token <= STORE__TOKEN_MAX (storage.c checks it: a ceiling above the largest token would
 * make every later open fail). */
static store_status lmdb_ledger_cover(void *impl, uint64_t token)
{
    store__lmdb *s = impl;
    if (token <= atomic_load(&s->ceiling)) {
        return STORE_OK;
    }
    /* ledger_mu makes concurrent raises one fsync each, not one per caller; LMDB's writer
     * lock orders the raise with the group-commit batches. */
    pthread_mutex_lock(&s->ledger_mu);
    store_status st = STORE_OK;
    if (token > atomic_load(&s->ceiling)) {
        uint64_t next = raised_ceiling(token, s->opts.ledger_step);
        int rc = put_ceiling(s, next);
        if (rc == 0) {
            /* Published only after the commit returned: nobody hands out a token above the
             * old ceiling before the new one is on disk. */
            atomic_store(&s->ceiling, next);
        } else {
            st = STORE_EIO; /* a full map too: the token must not be handed out */
        }
    }
    pthread_mutex_unlock(&s->ledger_mu);
    return st;
}

/* Reads DIR/STORE_LEGACY_SECRET_FILE into out. Returns 1 when read, 0 when there is no such
 * file, or -1 with err when it cannot be read or is malformed. */
static int read_legacy_secret(const char *dir, unsigned char *out, char *err, size_t errlen)
{
    char path[4096];
    struct stat sb;
    size_t got = 0;

    int len = snprintf(path, sizeof path, "%s/%s", dir, STORE_LEGACY_SECRET_FILE);
    if (len < 0 || (size_t)len >= sizeof path) {
        snprintf(err, errlen, "the data directory's path is too long");
        return -1;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && errno == ENOENT) {
        return 0;
    }
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s: %s", STORE_LEGACY_SECRET_FILE, strerror(errno));
        return -1;
    }
    int ok = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size == STORE_SECRET_LEN;
    while (ok && got < STORE_SECRET_LEN) {
        ssize_t n = read(fd, out + got, STORE_SECRET_LEN - got);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        ok = n > 0;
        got += n > 0 ? (size_t)n : 0;
    }
    close(fd);
    if (!ok || !store__secret_valid(out, STORE_SECRET_LEN)) {
        snprintf(err, errlen, "%s is malformed: it must be a regular file of %d random bytes. "
                 "Restore it from a backup, or delete it to make a new one (then owners derived "
                 "from Idempotency-Keys sent before this restart change)",
                 STORE_LEGACY_SECRET_FILE, STORE_SECRET_LEN);
        return -1;
    }
    return 1;
}

/* One write transaction reads the secret and, when there is none, puts the imported or new
 * one: LMDB's single writer makes the check and the put atomic, so two callers can never
 * make two secrets. The commit is synchronous (the environment has no NOSYNC flag), so the
 * bytes are durable before anyone derives an owner from them. */
static store_status lmdb_secret(void *impl, unsigned char out[STORE_SECRET_LEN], char *err,
                                size_t errlen)
{
    store__lmdb *s = impl;
    char scratch[8];
    MDB_txn *txn = NULL;
    MDB_val key = {sizeof SECRET_KEY - 1, (void *)SECRET_KEY};
    MDB_val val;
    unsigned char made[STORE_SECRET_LEN];
    store_status st = STORE_OK;

    if (err == NULL) {
        err = scratch;
        errlen = sizeof scratch;
    }
    int rc = mdb_txn_begin(s->env, NULL, 0, &txn);
    if (rc != 0) {
        snprintf(err, errlen, "cannot begin a transaction: %s", mdb_strerror(rc));
        st = store__mdb_status(rc);
        goto out;
    }
    rc = mdb_get(txn, s->meta, &key, &val);
    if (rc == 0) {
        if (!store__secret_valid(val.mv_data, val.mv_size)) {
            snprintf(err, errlen, "the store's owner secret is malformed (%zu bytes)",
                     val.mv_size);
            st = STORE_INVALID;
        } else {
            memcpy(out, val.mv_data, STORE_SECRET_LEN);
        }
        mdb_txn_abort(txn);
        goto out;
    }
    if (rc != MDB_NOTFOUND) {
        mdb_txn_abort(txn);
        snprintf(err, errlen, "cannot read the owner secret: %s", mdb_strerror(rc));
        st = store__mdb_status(rc);
        goto out;
    }
    int found = read_legacy_secret(s->opts.dir, made, err, errlen);
    if (found < 0) {
        mdb_txn_abort(txn);
        st = STORE_INVALID;
        goto out;
    }
    if (found == 0 && store__secret_make(made) != 0) {
        mdb_txn_abort(txn); /* never use a partly random key */
        snprintf(err, errlen, "cannot get random bytes for the owner secret");
        st = STORE_EIO;
        goto out;
    }
    val.mv_size = sizeof made;
    val.mv_data = made;
    rc = mdb_put(txn, s->meta, &key, &val, 0);
    if (rc == 0) {
        rc = mdb_txn_commit(txn);
    } else {
        mdb_txn_abort(txn);
    }
    if (rc != 0) {
        snprintf(err, errlen, "cannot store the owner secret: %s", mdb_strerror(rc));
        st = store__mdb_status(rc);
        goto out;
    }
    memcpy(out, made, STORE_SECRET_LEN);
out:
    return st;
}

/* LMDB has no per-resource grant state: one process owns the data directory, and the
 * gateway's in-process floor keeps its own tokens unique; covering the token by the durable
 * ceiling keeps it above the floor of every later process. A per-grant fsync would cost every
 * /lock one. */
static store_status lmdb_grant(void *impl, const char *resource, uint64_t token,
                               const unsigned char *holder, uint64_t *highest)
{
    store__lmdb *s = impl;
    (void)resource;
    (void)holder;
    if (token <= s->floor) {
        *highest = s->floor;
        return STORE_STALE;
    }
    return lmdb_ledger_cover(impl, token);
}

int store__lmdb_env_flags(void *impl, unsigned int *flags)
{
    store__lmdb *s = impl;
    return mdb_env_get_flags(s->env, flags);
}

const store__ops store__lmdb_ops = {
    .name = "lmdb",
    .close = lmdb_close,
    .run_batch = store__lmdb_run_batch,
    .read = lmdb_read,
    .highest = lmdb_highest,
    .list = lmdb_list,
    .del = lmdb_delete,
    .fence = lmdb_fence,
    .ledger_floor = lmdb_ledger_floor,
    .ledger_ceiling = lmdb_ledger_ceiling,
    .ledger_cover = lmdb_ledger_cover,
    .grant = lmdb_grant,
    .grant_needed = 0,
    .secret = lmdb_secret,
};
