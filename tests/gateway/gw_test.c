#include "gw_test.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "harness.h"

#ifndef FENCEGATE_BIN
#error "FENCEGATE_BIN must name the fencegate binary under test"
#endif

static int curl_ready;

static void curl_init_once(void)
{
    if (!curl_ready) {
        curl_global_init(CURL_GLOBAL_DEFAULT);
        curl_ready = 1;
    }
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0;

    if (f == NULL) {
        return NULL;
    }
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = (cap + 4096) * 2;
            char *grown = realloc(buf, cap);
            if (grown == NULL) {
                break;
            }
            buf = grown;
        }
        size_t n = fread(buf + len, 1, 4096, f);
        len += n;
        if (n == 0) {
            break;
        }
    }
    fclose(f);
    if (buf != NULL) {
        buf[len] = '\0';
    }
    return buf;
}

void gwt_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

int gwt_log_contains(const gwt_proc *p, const char *needle)
{
    char *text = read_file(p->log);
    int found = text != NULL && strstr(text, needle) != NULL;
    free(text);
    return found;
}

int gwt_log_wait(const gwt_proc *p, const char *needle)
{
    int64_t deadline = th_now_ms() + 10000;
    while (!gwt_log_contains(p, needle)) {
        if (th_now_ms() > deadline) {
            return 0;
        }
        th_nap_ms(10);
    }
    return 1;
}

static void dump_log(const gwt_proc *p)
{
    char *text = read_file(p->log);
    fprintf(stderr, "---- fencegate log (%s) ----\n%s\n---- end of log ----\n", p->log,
            text != NULL ? text : "(unreadable)");
    free(text);
}

static const char *const fg_env_vars[] = {
    "FENCEGATE_LISTEN",        "FENCEGATE_REDIS",   "FENCEGATE_DATA",
    "FENCEGATE_AUTH_TOKEN_FILE", "FENCEGATE_MAX_VALUE_BYTES", "FENCEGATE_THREADS",
    "FENCEGATE_MAX_CONNECTIONS", "FENCEGATE_LOG_FORMAT", "FENCEGATE_MAP_SIZE",
    "FENCEGATE_MAX_WAITERS",   "FENCEGATE_TOKEN_KEY_IDLE_TTL", NULL};

/* In the child: a clean FENCEGATE_* environment, so the caller's shell cannot leak in. */
static void child_env(const char *const *env)
{
    for (int i = 0; fg_env_vars[i] != NULL; i++) {
        unsetenv(fg_env_vars[i]);
    }
    for (int i = 0; env != NULL && env[i] != NULL; i++) {
        const char *eq = strchr(env[i], '=');
        if (eq != NULL) {
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)(eq - env[i]), env[i]);
            setenv(name, eq + 1, 1);
        }
    }
}

int gwt_child_nofile = 0;

static pid_t spawn(gwt_proc *p, const char *redis_url, const char *const *extra_args,
                   int nofile)
{
    char listen[64];
    const char *argv[64];
    int n = 0;

    snprintf(listen, sizeof listen, "127.0.0.1:%d", p->port);
    argv[n++] = FENCEGATE_BIN;
    argv[n++] = "--listen";
    argv[n++] = listen;
    argv[n++] = "--redis";
    argv[n++] = redis_url;
    argv[n++] = "--data";
    argv[n++] = p->data;
    argv[n++] = "--threads";
    argv[n++] = "4";
    for (int i = 0; extra_args != NULL && extra_args[i] != NULL && n < 62; i++) {
        argv[n++] = extra_args[i];
    }
    argv[n] = NULL;

    pid_t pid = fork();
    if (pid == 0) {
        /* If the test program dies (a crash, a failed assertion that skips cleanup), the
         * gateway goes with it instead of holding ctest's output pipe open forever. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(p->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
        }
        if (nofile > 0) {
            struct rlimit rl = {(rlim_t)nofile, (rlim_t)nofile};
            if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
                fprintf(stderr, "gw_test: setrlimit(%d): %s\n", nofile, strerror(errno));
                _exit(126);
            }
        }
        child_env(NULL);
        execv(FENCEGATE_BIN, (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", FENCEGATE_BIN, strerror(errno));
        _exit(127);
    }
    return pid;
}

/* Waits until /healthz answers 200 (returns 1) or the process exits (returns 0). */
static int wait_healthy(gwt_proc *p)
{
    int64_t deadline = th_now_ms() + 15000;
    while (th_now_ms() < deadline) {
        int status;
        if (waitpid(p->pid, &status, WNOHANG) == p->pid) {
            p->pid = 0;
            return 0;
        }
        gwt_resp r;
        gwt_get(p, "/healthz", &r);
        long code = r.status;
        gwt_resp_free(&r);
        if (code == 200) {
            return 1;
        }
        th_nap_ms(20);
    }
    dump_log(p);
    fail_msg("fencegate did not answer /healthz within 15 s");
    return 0;
}

void gwt_start(gwt_proc *p, const char *redis_url, const char *data_dir,
               const char *const *extra_args)
{
    int nofile = gwt_child_nofile;
    gwt_child_nofile = 0; /* this start only */
    curl_init_once();
    memset(p, 0, sizeof *p);
    th_tempdir(p->dir, sizeof p->dir, "gateway");
    snprintf(p->log, sizeof p->log, "%s/fencegate.log", p->dir);
    if (data_dir != NULL) {
        snprintf(p->data, sizeof p->data, "%s", data_dir);
    } else {
        snprintf(p->data, sizeof p->data, "%s/data", p->dir);
    }
    /* A port taken between th_free_port() and the bind makes fencegate exit at once. */
    for (int attempt = 0; attempt < 5; attempt++) {
        p->port = th_free_port();
        snprintf(p->url, sizeof p->url, "http://127.0.0.1:%d", p->port);
        p->pid = spawn(p, redis_url, extra_args, nofile);
        assert_true(p->pid > 0);
        if (wait_healthy(p)) {
            return;
        }
        if (!gwt_log_contains(p, "cannot serve")) {
            break;
        }
    }
    dump_log(p);
    fail_msg("fencegate exited during start-up");
}

int gwt_signal_wait(gwt_proc *p, int sig)
{
    int status = 0;

    if (p->pid <= 0) {
        return -1;
    }
    kill(p->pid, sig);
    int64_t deadline = th_now_ms() + 20000;
    for (;;) {
        pid_t got = waitpid(p->pid, &status, WNOHANG);
        if (got == p->pid) {
            break;
        }
        if (th_now_ms() > deadline) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, NULL, 0);
            p->pid = 0;
            dump_log(p);
            return -1;
        }
        th_nap_ms(10);
    }
    p->pid = 0;
    if (WIFEXITED(status)) {
        if (WEXITSTATUS(status) != 0) {
            dump_log(p);
        }
        return WEXITSTATUS(status);
    }
    dump_log(p);
    return -1;
}

void gwt_cleanup(gwt_proc *p)
{
    if (p->pid > 0) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, NULL, 0);
        p->pid = 0;
    }
    th_rmtree(p->dir);
    p->dir[0] = '\0';
}

int gwt_stop(gwt_proc *p)
{
    int rc = gwt_signal_wait(p, SIGTERM);
    gwt_cleanup(p);
    return rc;
}

/* ---- HTTP -------------------------------------------------------------------------- */

typedef struct sink {
    char *data;
    size_t len;
} sink;

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    sink *s = userdata;
    size_t n = size * nmemb;
    char *grown = realloc(s->data, s->len + n + 1);
    if (grown == NULL) {
        return 0;
    }
    s->data = grown;
    memcpy(s->data + s->len, ptr, n);
    s->len += n;
    s->data[s->len] = '\0';
    return n;
}

static void header_value(const char *line, size_t n, const char *name, char *out, size_t outlen)
{
    size_t nlen = strlen(name);
    if (n <= nlen + 1 || strncasecmp(line, name, nlen) != 0 || line[nlen] != ':') {
        return;
    }
    const char *v = line + nlen + 1;
    const char *end = line + n;
    while (v < end && (*v == ' ' || *v == '\t')) {
        v++;
    }
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ')) {
        end--;
    }
    snprintf(out, outlen, "%.*s", (int)(end - v), v);
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *userdata)
{
    gwt_resp *r = userdata;
    size_t n = size * nmemb;
    header_value(line, n, "Retry-After", r->retry_after, sizeof r->retry_after);
    header_value(line, n, "Allow", r->allow, sizeof r->allow);
    header_value(line, n, "Fencing-Token", r->fencing_token, sizeof r->fencing_token);
    header_value(line, n, "ETag", r->etag, sizeof r->etag);
    header_value(line, n, "Content-Type", r->content_type, sizeof r->content_type);
    header_value(line, n, "WWW-Authenticate", r->www_authenticate, sizeof r->www_authenticate);
    header_value(line, n, "Content-Security-Policy", r->content_security_policy,
                 sizeof r->content_security_policy);
    header_value(line, n, "X-Content-Type-Options", r->content_type_options,
                 sizeof r->content_type_options);
    return n;
}

typedef struct source {
    const char *data;
    size_t len;
    size_t off;
} source;

static size_t on_read(char *buf, size_t size, size_t nitems, void *userdata)
{
    source *s = userdata;
    size_t n = size * nitems;
    if (n > s->len - s->off) {
        n = s->len - s->off;
    }
    memcpy(buf, s->data + s->off, n);
    s->off += n;
    return n;
}

void gwt_http(const gwt_proc *p, const char *method, const char *path,
              const char *const *headers, const void *body, size_t len, int chunked,
              gwt_resp *r)
{
    char url[2048];
    sink s = {NULL, 0};
    source src = {body, len, 0};
    struct curl_slist *list = NULL;
    CURL *curl = curl_easy_init();

    memset(r, 0, sizeof *r);
    assert_non_null(curl);
    snprintf(url, sizeof url, "%s%s", p->url, path);
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(curl, CURLOPT_NOBODY, 1L); /* else curl waits for a body */
    }
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, 90L);
    curl_easy_setopt(curl, CURLOPT_PATH_AS_IS, 1L);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, r);
    /* No "Expect: 100-continue": the gateway's early answers are then plain and immediate. */
    list = curl_slist_append(list, "Expect:");
    for (int i = 0; headers != NULL && headers[i] != NULL; i++) {
        list = curl_slist_append(list, headers[i]);
    }
    if (chunked) {
        list = curl_slist_append(list, "Transfer-Encoding: chunked");
        curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(curl, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(curl, CURLOPT_READDATA, &src);
    } else if (body != NULL) {
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, list);
    CURLcode rc = curl_easy_perform(curl);
    if (rc == CURLE_OK) {
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r->status);
    }
    curl_slist_free_all(list);
    curl_easy_cleanup(curl);
    r->body = s.data != NULL ? s.data : calloc(1, 1);
    r->len = s.len;
    r->json = json_loadb(r->body, r->len, 0, NULL);
}

void gwt_post(const gwt_proc *p, const char *path, const char *json, gwt_resp *r)
{
    static const char *const headers[] = {"Content-Type: application/json", NULL};
    gwt_http(p, "POST", path, headers, json, strlen(json), 0, r);
}

void gwt_get(const gwt_proc *p, const char *path, gwt_resp *r)
{
    gwt_http(p, "GET", path, NULL, NULL, 0, 0, r);
}

int gwt_list_all(const gwt_proc *p, const char *prefix, int limit, char *out, size_t outlen)
{
    char after[256] = "", last[256] = "";
    size_t used = 0;
    int count = 0;

    out[0] = '\0';
    for (int page = 0; page < 10000; page++) {
        char path[600];
        gwt_resp r;
        snprintf(path, sizeof path, "/locks?limit=%d%s%s%s%s", limit,
                 prefix != NULL ? "&prefix=" : "", prefix != NULL ? prefix : "",
                 after[0] != '\0' ? "&after=" : "", after);
        gwt_get(p, path, &r);
        gwt_assert_status(&r, 200, NULL);
        json_t *locks = json_object_get(r.json, "locks");
        json_t *next = json_object_get(r.json, "next");
        assert_true(json_is_array(locks));
        assert_true(json_array_size(locks) <= (size_t)limit);
        assert_null(strstr(r.body, "owner"));
        for (size_t i = 0; i < json_array_size(locks); i++) {
            json_t *e = json_array_get(locks, i);
            const char *name = json_string_value(json_object_get(e, "resource"));
            assert_non_null(name);
            assert_true(json_integer_value(json_object_get(e, "token")) > 0);
            assert_true(json_integer_value(json_object_get(e, "holds")) > 0);
            assert_true(json_is_integer(json_object_get(e, "ttl_ms")));
            assert_true(json_is_integer(json_object_get(e, "waiters")));
            assert_int_equal((int)json_object_size(e), 7);
            /* Sorted, across pages too: every name is after the one before and the cursor. */
            assert_true(strcmp(name, last) > 0);
            assert_true(after[0] == '\0' || strcmp(name, after) > 0);
            snprintf(last, sizeof last, "%s", name);
            int n = snprintf(out + used, outlen - used, "%s%s", used > 0 ? "," : "", name);
            assert_true(n > 0 && (size_t)n < outlen - used);
            used += (size_t)n;
            count++;
        }
        if (json_is_null(next)) {
            gwt_resp_free(&r);
            return count;
        }
        assert_true(json_is_string(next));
        assert_true(after[0] == '\0' || strcmp(json_string_value(next), after) > 0);
        snprintf(after, sizeof after, "%s", json_string_value(next));
        gwt_resp_free(&r);
    }
    fail_msg("GET /locks never ended its pages");
    return -1;
}

long gwt_lock(const gwt_proc *p, const char *resource, const char *owner, long long *token)
{
    char body[512];
    gwt_resp r;
    snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"%s\",\"ttl_ms\":60000}",
             resource, owner);
    gwt_post(p, "/lock", body, &r);
    long status = r.status;
    *token = status == 200 ? gwt_int(&r, "token") : 0;
    gwt_resp_free(&r);
    return status;
}

long gwt_unlock(const gwt_proc *p, const char *resource, const char *owner)
{
    char body[512];
    gwt_resp r;
    snprintf(body, sizeof body, "{\"resource\":\"%s\",\"owner\":\"%s\"}", resource, owner);
    gwt_post(p, "/unlock", body, &r);
    long status = r.status;
    gwt_resp_free(&r);
    return status;
}

long gwt_put_fenced(const gwt_proc *p, const char *resource, long long token,
                    const char *value, gwt_resp *out)
{
    char path[256], fence[64];
    gwt_resp r;
    snprintf(path, sizeof path, "/resources/%s", resource);
    snprintf(fence, sizeof fence, "Fencing-Token: %lld", token);
    const char *const headers[] = {fence, "Content-Type: text/plain", NULL};
    gwt_http(p, "PUT", path, headers, value, strlen(value), 0, &r);
    long status = r.status;
    if (out != NULL) {
        *out = r;
    } else {
        gwt_resp_free(&r);
    }
    return status;
}

void gwt_assert_value(const gwt_proc *p, const char *resource, const char *value)
{
    char path[256];
    gwt_resp r;
    snprintf(path, sizeof path, "/resources/%s", resource);
    gwt_get(p, path, &r);
    gwt_assert_status(&r, 200, NULL);
    if (r.len != strlen(value) || memcmp(r.body, value, r.len) != 0) {
        fail_msg("GET %s via %s: '%.*s', expected '%s'", path, p->url, (int)r.len, r.body,
                 value);
    }
    gwt_resp_free(&r);
}

void gwt_assert_lock_mode(const gwt_proc *p, const char *resource, const char *mode,
                          long long holders)
{
    char path[256];
    gwt_resp r;
    snprintf(path, sizeof path, "/locks/%s", resource);
    gwt_get(p, path, &r);
    gwt_assert_status(&r, 200, NULL);
    assert_true(json_is_true(json_object_get(r.json, "locked")));
    assert_string_equal(gwt_str(&r, "mode"), mode);
    assert_int_equal(gwt_int(&r, "holders"), holders);
    assert_null(json_object_get(r.json, "owner"));
    gwt_resp_free(&r);
}

long long gwt_metric(const gwt_proc *p, const char *name)
{
    gwt_resp r;
    long long v = -1;
    char needle[200];

    gwt_get(p, "/metrics", &r);
    snprintf(needle, sizeof needle, "\n%s ", name);
    const char *at = r.body != NULL ? strstr(r.body, needle) : NULL;
    if (at != NULL) {
        v = strtoll(at + strlen(needle), NULL, 10);
    }
    gwt_resp_free(&r);
    return v;
}

void gwt_await_metric(const gwt_proc *p, const char *name, long long want)
{
    int64_t deadline = th_now_ms() + 15000;
    long long v = gwt_metric(p, name);
    while (v != want && th_now_ms() < deadline) {
        th_nap_ms(10);
        v = gwt_metric(p, name);
    }
    if (v != want) {
        fail_msg("%s is %lld, expected %lld", name, v, want);
    }
}

void gwt_resp_free(gwt_resp *r)
{
    free(r->body);
    json_decref(r->json);
    memset(r, 0, sizeof *r);
}

long long gwt_int(const gwt_resp *r, const char *field)
{
    json_t *v = r->json != NULL ? json_object_get(r->json, field) : NULL;
    return json_is_integer(v) ? (long long)json_integer_value(v) : -1;
}

const char *gwt_str(const gwt_resp *r, const char *field)
{
    json_t *v = r->json != NULL ? json_object_get(r->json, field) : NULL;
    return json_is_string(v) ? json_string_value(v) : "";
}

void gwt__assert_status(const gwt_resp *r, long want_status, const char *want_code,
                        const char *file, int line)
{
    int ok = r->status == want_status;
    if (ok && want_code != NULL) {
        ok = strcmp(gwt_str(r, "error"), want_code) == 0 && gwt_str(r, "message")[0] != '\0';
    }
    if (!ok) {
        print_error("%s:%d: expected %ld %s, got %ld with body: %s\n", file, line,
                       want_status, want_code != NULL ? want_code : "", r->status,
                       r->body != NULL ? r->body : "(none)");
        _fail(file, line);
    }
}

/* ---- Running the binary for CLI checks --------------------------------------------- */

static void drain(int fd, sink *s, int *open_flag)
{
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
        on_body(buf, 1, (size_t)n, s);
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        *open_flag = 0;
    }
}

/* Reads both pipes until they close or 20 s pass. Returns 1 when the deadline passed. */
static int collect(int fd_out, int fd_err, sink *so, sink *se)
{
    int open_out = 1, open_err = 1;
    int64_t deadline = th_now_ms() + 20000;

    while (open_out || open_err) {
        struct pollfd fds[2] = {{open_out ? fd_out : -1, POLLIN, 0},
                                {open_err ? fd_err : -1, POLLIN, 0}};
        int64_t left = deadline - th_now_ms();
        if (left <= 0) {
            return 1;
        }
        if (poll(fds, 2, (int)left) <= 0) {
            continue;
        }
        if (fds[0].revents != 0) {
            drain(fd_out, so, &open_out);
        }
        if (fds[1].revents != 0) {
            drain(fd_err, se, &open_err);
        }
    }
    return 0;
}

int gwt_run(const char *const *argv, const char *const *env, char **out, char **err)
{
    int po[2], pe[2];
    const char *args[32];
    int n = 0;
    sink so = {NULL, 0}, se = {NULL, 0};

    args[n++] = FENCEGATE_BIN;
    for (int i = 0; argv != NULL && argv[i] != NULL && n < 31; i++) {
        args[n++] = argv[i];
    }
    args[n] = NULL;
    int nofile = gwt_child_nofile;
    gwt_child_nofile = 0; /* this run only */
    assert_int_equal(pipe(po), 0);
    assert_int_equal(pipe(pe), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(po[1], STDOUT_FILENO);
        dup2(pe[1], STDERR_FILENO);
        close(po[0]);
        close(pe[0]);
        if (nofile > 0) {
            struct rlimit rl = {(rlim_t)nofile, (rlim_t)nofile};
            if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
                fprintf(stderr, "gw_test: setrlimit(%d): %s\n", nofile, strerror(errno));
                _exit(126);
            }
        }
        child_env(env);
        execv(FENCEGATE_BIN, (char *const *)args);
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    int timed_out = collect(po[0], pe[0], &so, &se);
    if (timed_out) {
        kill(pid, SIGKILL);
    }
    close(po[0]);
    close(pe[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    *out = so.data != NULL ? so.data : calloc(1, 1);
    *err = se.data != NULL ? se.data : calloc(1, 1);
    return timed_out || !WIFEXITED(status) ? -1 : WEXITSTATUS(status);
}
