/* Reading and writing the fault suite's history lines (history.h). */
#include "history.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const kind_names[FH_KIND_COUNT] = {
    "lock", "unlock", "renew", "write", "read", "final", "mark", "force", "txn", "balance",
    "fenced_read", "session_end", "session_renew"};

static const struct {
    const char *name;
    unsigned flag;
} flag_names[] = {{"forged", FH_F_FORGED},
                  {"stale", FH_F_STALE},
                  {"after_pause", FH_F_AFTER_PAUSE},
                  {"after_steal", FH_F_AFTER_STEAL},
                  {"watchdog", FH_F_WATCHDOG},
                  {"herd", FH_F_HERD},
                  {"shared", FH_F_SHARED}};

#define FLAG_COUNT (sizeof flag_names / sizeof flag_names[0])

int64_t fh_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

const char *fh_kind_name(fh_kind kind)
{
    return kind < FH_KIND_COUNT ? kind_names[kind] : "?";
}

/* Copies src into dst (len bytes), "-" meaning empty. Returns -1 if it does not fit. */
static int copy_field(char *dst, size_t len, const char *src)
{
    if (strcmp(src, "-") == 0)
        src = "";
    if (strlen(src) >= len)
        return -1;
    strcpy(dst, src);
    return 0;
}

static int parse_ll(const char *s, long long *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0')
        return -1;
    *out = v;
    return 0;
}

static int parse_flags(const char *s, unsigned *out)
{
    char buf[FH_FIELD_MAX];
    char *save = NULL;
    *out = 0;
    if (strcmp(s, "-") == 0)
        return 0;
    if (strlen(s) >= sizeof buf)
        return -1;
    strcpy(buf, s);
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        size_t i;
        for (i = 0; i < FLAG_COUNT && strcmp(tok, flag_names[i].name) != 0; i++)
            ;
        if (i == FLAG_COUNT)
            return -1;
        *out |= flag_names[i].flag;
    }
    return 0;
}

int fh_parse(const char *line, fh_op *op)
{
    char buf[2048];
    char *field[14];
    size_t n = 0;
    long long v[6];

    if (strlen(line) >= sizeof buf)
        return -1;
    strcpy(buf, line);
    buf[strcspn(buf, "\r\n")] = '\0';
    memset(op, 0, sizeof *op);
    char *p = buf;
    for (n = 0; n < 14 && p != NULL; n++) {
        field[n] = p;
        p = strchr(p, '\t');
        if (p != NULL)
            *p++ = '\0';
    }
    if (n != 14 || p != NULL)
        return -1;
    size_t k;
    for (k = 0; k < FH_KIND_COUNT && strcmp(field[1], kind_names[k]) != 0; k++)
        ;
    if (k == FH_KIND_COUNT)
        return -1;
    op->kind = (fh_kind)k;
    if (copy_field(op->client, sizeof op->client, field[0]) != 0 ||
        copy_field(op->resource, sizeof op->resource, field[2]) != 0 ||
        copy_field(op->error, sizeof op->error, field[6]) != 0 ||
        copy_field(op->owner, sizeof op->owner, field[9]) != 0 ||
        copy_field(op->body, sizeof op->body, field[13]) != 0)
        return -1;
    if (parse_ll(field[3], &v[0]) != 0 || parse_ll(field[4], &v[1]) != 0 ||
        parse_ll(field[5], &v[2]) != 0 || parse_ll(field[7], &op->token) != 0 ||
        parse_ll(field[8], &op->version) != 0 || parse_ll(field[10], &v[3]) != 0 ||
        parse_ll(field[11], &v[4]) != 0 || parse_flags(field[12], &op->flags) != 0)
        return -1;
    op->start_ns = v[0];
    op->end_ns = v[1];
    op->status = (int)v[2];
    op->ttl_ms = (long)v[3];
    op->wait_ms = (long)v[4];
    return 0;
}

/* Writes s, or "-" when empty, with tabs and line breaks as spaces. */
static void put_text(char *dst, size_t len, const char *s)
{
    snprintf(dst, len, "%s", s[0] != '\0' ? s : "-");
    for (char *c = dst; *c != '\0'; c++)
        if (*c == '\t' || *c == '\n' || *c == '\r')
            *c = ' ';
}

int fh_format(const fh_op *op, char *buf, size_t len)
{
    char client[32], resource[FH_FIELD_MAX], error[64], owner[FH_FIELD_MAX], body[FH_FIELD_MAX];
    char flags[FH_FIELD_MAX] = "";

    put_text(client, sizeof client, op->client);
    put_text(resource, sizeof resource, op->resource);
    put_text(error, sizeof error, op->error);
    put_text(owner, sizeof owner, op->owner);
    put_text(body, sizeof body, op->body);
    for (size_t i = 0; i < FLAG_COUNT; i++) {
        if ((op->flags & flag_names[i].flag) == 0)
            continue;
        if (flags[0] != '\0')
            strcat(flags, ",");
        strcat(flags, flag_names[i].name);
    }
    int n = snprintf(buf, len, "%s\t%s\t%s\t%lld\t%lld\t%d\t%s\t%lld\t%lld\t%s\t%ld\t%ld\t%s\t%s\n",
                     client, fh_kind_name(op->kind), resource, (long long)op->start_ns,
                     (long long)op->end_ns, op->status, error, op->token, op->version, owner,
                     op->ttl_ms, op->wait_ms, flags[0] != '\0' ? flags : "-", body);
    return n < 0 || (size_t)n >= len ? -1 : n;
}

int fh_append(fh_history *h, const fh_op *op)
{
    if (h->n == h->cap) {
        size_t cap = h->cap > 0 ? h->cap * 2 : 256;
        fh_op *ops = realloc(h->ops, cap * sizeof *ops);
        if (ops == NULL)
            return -1;
        h->ops = ops;
        h->cap = cap;
    }
    h->ops[h->n++] = *op;
    return 0;
}

int fh_load(fh_history *h, const char *path)
{
    char line[2048];
    size_t lineno = 0;
    int rc = 0;
    FILE *f = fopen(path, "r");

    if (f == NULL) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return -1;
    }
    while (fgets(line, sizeof line, f) != NULL) {
        fh_op op;
        lineno++;
        if (line[0] == '\n' || line[0] == '#')
            continue;
        if (fh_parse(line, &op) != 0) {
            fprintf(stderr, "%s:%zu: malformed history line\n", path, lineno);
            rc = -1;
            break;
        }
        op.line = lineno;
        if (fh_append(h, &op) != 0) {
            fprintf(stderr, "%s: out of memory\n", path);
            rc = -1;
            break;
        }
    }
    fclose(f);
    return rc;
}

void fh_free(fh_history *h)
{
    free(h->ops);
    h->ops = NULL;
    h->n = h->cap = 0;
}
