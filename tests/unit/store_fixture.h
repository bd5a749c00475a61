/* Test fixture: a store server running on its own thread inside the test
 * process (store/store_thread.c, so sanitizers see the server too), plus
 * helpers for clients and raw sockets that speak bytes directly. */
#ifndef DDPRUN_TESTS_UNIT_STORE_FIXTURE_H
#define DDPRUN_TESTS_UNIT_STORE_FIXTURE_H

#include "store/store_client.h"
#include "store/store_server.h"
#include "store/store_thread.h"

typedef struct {
    store_thread *host;
    int port;
} store_fixture;

/* Starts a server on 127.0.0.1 (unless opts says otherwise) and a free port
 * (opts may be NULL); fails the test if it cannot. */
void fixture_start(store_fixture *f, const store_server_opts *opts);
void fixture_stop(store_fixture *f);
/* A current-generation client with a 5 s timeout; fails the test if it cannot connect. */
store_client *fixture_client(store_fixture *f);
store_client *fixture_client_opts(store_fixture *f, store_client_opts o);
/* A plain blocking TCP socket to the server. */
int fixture_raw(store_fixture *f);
void raw_send(int fd, const void *p, size_t n);
/* Reads exactly n bytes within timeout_ms; returns bytes read (less on EOF/timeout). */
size_t raw_recv(int fd, void *p, size_t n, int timeout_ms);
/* 1 if the server closed the connection within timeout_ms. */
int raw_closed(int fd, int timeout_ms);
void sleep_ms(int ms);

#endif
