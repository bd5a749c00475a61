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

void fixture_start(store_fixture *f, const store_server_opts *opts) {
    store_server_opts o = opts ? *opts : (store_server_opts){0};
    if (!o.host) o.host = "127.0.0.1";
    memset(f, 0, sizeof *f);
    int rc = store_thread_start(&o, &f->host, &f->port);
    if (rc) test_fail(__FILE__, __LINE__, "store server did not start: %s", strerror(-rc));
}

void fixture_stop(store_fixture *f) { store_thread_stop(f->host); }

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
