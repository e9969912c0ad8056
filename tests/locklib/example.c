/* Take a fenced lock, use its token, release it. Build:
 *   cc example.c $(pkg-config --cflags --libs locklib) -o example */
#include <stdio.h>

#include <locklib/locklib.h>

int main(int argc, char **argv)
{
    const char *url = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
    char owner[LK_OWNER_ID_LEN + 1];
    lk_client *c = NULL;
    lk_result r;

    lk_status st = lk_client_open(&c, url, NULL);
    if (st != LK_OK) {
        fprintf(stderr, "open %s: %s\n", url, c != NULL ? lk_errstr(c) : lk_status_str(st));
        lk_client_close(c);
        return 1;
    }
    lk_owner_id(c, owner); /* random per handle, plus this thread's number */

    /* Wait up to 5 s for the lock; hold it with a 10 s lease. */
    st = lk_acquire_wait(c, "orders", owner, 10000, 0, NULL, 5000, &r);
    if (st != LK_ACQUIRED) {
        fprintf(stderr, "acquire: %s %s\n", lk_status_name(st), lk_errstr(c));
        lk_client_close(c);
        return 1;
    }
    printf("holding orders with fencing token %lld\n", (long long)r.token);
    /* ... send r.token with every write, so the storage can refuse stale writers ... */

    st = lk_release(c, "orders", owner, NULL, &r);
    printf("release: %s\n", lk_status_name(st));
    lk_client_close(c);
    return st == LK_RELEASED ? 0 : 1;
}
