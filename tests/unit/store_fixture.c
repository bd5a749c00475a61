/* See store_fixture.h. */
#include "tests/unit/store_fixture.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tests/unit/test.h"

static void on_stop(uv_async_t *a) {
    store_fixture *f = a->data;
    store_server_close(&f->srv, NULL);
    uv_close((uv_handle_t *)&f->stop, NULL);
}

static void *server_thread(void *arg) {
    store_fixture *f = arg;
    uv_loop_init(&f->loop);
    int rc = store_server_init(&f->loop, &f->srv, &f->opts);
    if (rc == 0) {
        uv_async_init(&f->loop, &f->stop, on_stop);
        f->stop.data = f;
    }
    pthread_mutex_lock(&f->mu);
    f->state = rc ? -1 : 1;
    f->port = rc ? 0 : store_server_port(&f->srv);
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    if (rc) return NULL;
    uv_run(&f->loop, UV_RUN_DEFAULT);
    uv_loop_close(&f->loop);
    return NULL;
}

void fixture_start(store_fixture *f, const store_server_opts *opts) {
    memset(f, 0, sizeof *f);
    if (opts) f->opts = *opts;
    if (!f->opts.host) f->opts.host = "127.0.0.1";
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    pthread_create(&f->thread, NULL, server_thread, f);
    pthread_mutex_lock(&f->mu);
    while (f->state == 0) pthread_cond_wait(&f->cv, &f->mu);
    pthread_mutex_unlock(&f->mu);
    if (f->state < 0) test_fail(__FILE__, __LINE__, "store server did not start");
}

void fixture_stop(store_fixture *f) {
    uv_async_send(&f->stop);
    pthread_join(f->thread, NULL);
}

store_client *fixture_client_opts(store_fixture *f, store_client_opts o) {
    if (!o.host) o.host = "127.0.0.1";
    o.port = f->port;
    if (!o.timeout_ms) o.timeout_ms = 5000;
    if (!o.connect_timeout_ms) o.connect_timeout_ms = 5000;
    store_client *c = NULL;
    int rc = store_client_connect(&o, &c);
    if (rc) test_fail(__FILE__, __LINE__, "connect: %s", strerror(-rc));
    return c;
}

store_client *fixture_client(store_fixture *f) {
    return fixture_client_opts(f, (store_client_opts){0});
}

int fixture_raw(store_fixture *f) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)f->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
        test_fail(__FILE__, __LINE__, "raw connect: %s", strerror(errno));
    return fd;
}

void raw_send(int fd, const void *p, size_t n) {
    if (send(fd, p, n, MSG_NOSIGNAL) != (ssize_t)n)
        test_fail(__FILE__, __LINE__, "raw send: %s", strerror(errno));
}

size_t raw_recv(int fd, void *p, size_t n, int timeout_ms) {
    size_t got = 0;
    while (got < n) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, timeout_ms) <= 0) break;
        ssize_t r = recv(fd, (char *)p + got, n - got, 0);
        if (r <= 0) break;
        got += (size_t)r;
    }
    return got;
}

int raw_closed(int fd, int timeout_ms) {
    char b[64];
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    if (poll(&pf, 1, timeout_ms) <= 0) return 0;
    ssize_t r = recv(fd, b, sizeof b, 0);
    return r == 0 || (r < 0 && errno == ECONNRESET);
}

void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}
