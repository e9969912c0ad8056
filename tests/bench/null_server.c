/*
 * null_server: a libmicrohttpd server that answers 200 "{}" to every request, started by
 * compare_bench to measure its load generator's ceiling. It runs MHD with its own internal
 * epoll thread pool of 8 (the gateway's way before its own loops, gateway/src/rt/loops.c; kept,
 * so that the ceiling stays comparable across rounds): the most a plain MHD server on this
 * machine gets from the load generator.
 *
 * Usage: null_server PORT   (listens on 127.0.0.1:PORT until SIGTERM or SIGINT)
 */
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#define NS_THREADS 8

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

/* Drains any request body, then answers 200 "{}". */
static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version,
                              const char *upload_data, size_t *upload_data_size,
                              void **req_cls)
{
    static int first_call;
    struct MHD_Response *resp = NULL;
    enum MHD_Result ret;
    (void)cls;
    (void)url;
    (void)method;
    (void)version;
    (void)upload_data;

    if (*req_cls == NULL) {
        *req_cls = &first_call;
        return MHD_YES;
    }
    if (*upload_data_size != 0) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    resp = MHD_create_response_from_buffer(2, (void *)"{}", MHD_RESPMEM_PERSISTENT);
    if (resp == NULL) {
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "application/json");
    ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

int main(int argc, char **argv)
{
    struct sockaddr_in addr = {.sin_family = AF_INET};
    struct sigaction sa = {.sa_handler = on_signal};
    struct MHD_Daemon *daemon = NULL;
    int port = argc == 2 ? atoi(argv[1]) : 0;

    if (port <= 0 || port > 65535) {
        fprintf(stderr, "usage: null_server PORT\n");
        return 2;
    }
    addr.sin_port = htons((uint16_t)port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    daemon = MHD_start_daemon(MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG,
                              (uint16_t)port, NULL, NULL, answer, NULL, MHD_OPTION_SOCK_ADDR,
                              &addr, MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)NS_THREADS,
                              MHD_OPTION_CONNECTION_LIMIT, 2048u, MHD_OPTION_END);
    if (daemon == NULL) {
        fprintf(stderr, "null_server: cannot serve on 127.0.0.1:%d\n", port);
        return 1;
    }
    while (!g_stop) {
        pause();
    }
    MHD_stop_daemon(daemon);
    return 0;
}
