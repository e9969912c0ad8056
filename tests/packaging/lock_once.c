/* Built by install_test.sh against an installed locklib through pkg-config alone: prints the
 * library's version, takes a lock on "packaging" and releases it.
 * Usage: lock_once REDIS_URL. Prints "version V", "token N", "released"; exits 1 on error. */
#include <stdio.h>

#include <locklib/locklib.h>

int main(int argc, char **argv)
{
    lk_client *c = NULL;
    lk_result r;
    char owner[LK_OWNER_ID_LEN + 1];

    if (argc != 2) {
        fprintf(stderr, "usage: lock_once REDIS_URL\n");
        return 1;
    }
    printf("version %s\n", lk_version());
    lk_status st = lk_client_open(&c, argv[1], NULL);
    if (st != LK_OK) {
        fprintf(stderr, "open: %s\n", c != NULL ? lk_errstr(c) : lk_status_str(st));
        lk_client_close(c);
        return 1;
    }
    lk_owner_id(c, owner);
    st = lk_acquire(c, "packaging", owner, 10000, 0, NULL, &r);
    if (st != LK_ACQUIRED) {
        fprintf(stderr, "acquire: %s %s\n", lk_status_name(st), lk_errstr(c));
        lk_client_close(c);
        return 1;
    }
    printf("token %lld\n", (long long)r.token);
    st = lk_release(c, "packaging", owner, NULL, &r);
    lk_client_close(c);
    if (st != LK_RELEASED) {
        fprintf(stderr, "release: %s\n", lk_status_name(st));
        return 1;
    }
    printf("released\n");
    return 0;
}
