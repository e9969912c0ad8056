/*
 * Test harness shared by every test program: a real redis-server started on a free loopback
 * port in a private temp directory and stopped by its PID, plus small helpers for
 * deadline-bounded waiting. Nothing here mocks Redis.
 */
#ifndef FG_TEST_HARNESS_H
#define FG_TEST_HARNESS_H

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

#endif
