/*
 * Test harness shared by every test program: a real redis-server started on a free loopback
 * port in a private temp directory and stopped by its PID, plus small helpers for
 * deadline-bounded waiting. Nothing here mocks Redis.
 */
#ifndef FG_TEST_HARNESS_H
#define FG_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct th_redis {
    pid_t pid;
    int port;
    char dir[256];        /* private temp dir: data, AOF, log */
    char url[128];        /* redis://127.0.0.1:<port> (with :password@ when set) */
    char password[64];    /* "" for none */
    int appendonly;       /* 1: AOF on with appendfsync always */
} th_redis;

/* Monotonic clock in milliseconds. */
int64_t th_now_ms(void);

/* Sleeps about ms milliseconds (used only inside deadline loops, never to synchronise). */
void th_nap_ms(int ms);

/* Makes a private temp dir (mkdtemp) named after `tag` into buf. Aborts the test on error. */
void th_tempdir(char *buf, size_t len, const char *tag);

/* Removes a directory tree (used by teardown). */
void th_rmtree(const char *dir);

/* A TCP port on 127.0.0.1 that was free a moment ago. */
int th_free_port(void);

/* Starts redis-server on a free port in a new temp dir. appendonly: 1 for AOF with
 * appendfsync always. password may be NULL. Fails the process loudly (exit 1 with a message)
 * when redis-server is missing or does not answer PING within 10 s. */
void th_redis_start(th_redis *r, int appendonly, const char *password);

/* Starts it again on the same port and dir (after th_redis_kill), keeping its files. */
void th_redis_restart(th_redis *r);

/* SIGKILL and reap; files stay. */
void th_redis_kill(th_redis *r);

/* Deletes the AOF and RDB files in its dir (call after th_redis_kill): a total data loss. */
void th_redis_wipe_files(th_redis *r);

/* SIGTERM, wait up to 5 s, SIGKILL if needed, remove the temp dir. */
void th_redis_stop(th_redis *r);

/* Runs one command through a fresh hiredis connection and returns the integer reply, or
 * -1 on error; the string reply, if any, is copied into out (outlen bytes, may be NULL).
 * For test setup and inspection only. */
long long th_redis_cmd(const th_redis *r, char *out, size_t outlen, const char *fmt, ...);

/* A real PostgreSQL 15 server: initdb into a private temp dir (as the postgres user when the
 * tests run as root, since initdb refuses root), the postmaster started directly (pid is its
 * own, not a wrapper's) on a free loopback port with its Unix socket in the temp dir. The
 * superuser "postgres" authenticates with `password` over TCP (scram-sha-256) and without one
 * over the socket. */
typedef struct th_pg {
    pid_t pid;            /* the postmaster */
    int port;
    char dir[256];        /* temp dir: data/, the socket, postgres.log */
    char bindir[256];     /* where initdb and postgres are */
    char password[64];
} th_pg;

/* initdb and start. Fails the process loudly (exit 1 with a message) when initdb is missing
 * (looked for in /usr/lib/postgresql/15/bin, then `pg_config --bindir`) or the server does
 * not accept connections within 30 s. */
void th_pg_start(th_pg *pg);

/* Starts it again on the same port and data (after th_pg_kill or th_pg_crash). */
void th_pg_restart(th_pg *pg);

/* SIGKILL the postmaster and reap it: a crash. Its backends exit by themselves. */
void th_pg_kill(th_pg *pg);

/* SIGQUIT the postmaster (pg_ctl stop -m immediate) and reap it. */
void th_pg_stop_immediate(th_pg *pg);

/* SIGTERM, wait up to 10 s, SIGKILL if needed, remove the temp dir. */
void th_pg_stop(th_pg *pg);

/* Writes postgresql://postgres:<password>@127.0.0.1:<port>/<db> into buf. */
void th_pg_url(const th_pg *pg, const char *db, char *buf, size_t len);

/* Runs sql as the superuser in database "postgres" over the socket. Returns 0, or -1 after
 * printing the server's error. */
int th_pg_exec(const th_pg *pg, const char *sql);

#endif
