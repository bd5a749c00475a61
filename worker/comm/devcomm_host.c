/* The CPU backend's devcomm (see devcomm.h): backend memory is host
 * memory, so the host communicator serves as it is. */
#include <errno.h>
#include <stdlib.h>

#include "worker/comm/devcomm.h"

static int host_allreduce_async(devcomm *d, float *buf, size_t count, void **req) {
    comm_req *r = NULL;
    int rc = comm_allreduce_sum_async(d->impl, buf, count, &r);
    *req = r;
    return rc;
}

static int host_wait(devcomm *d, void *req) {
    (void)d;
    return comm_wait(req);
}

static int host_sync(devcomm *d) {
    (void)d;
    return 0;
}

static int host_broadcast(devcomm *d, void *buf, size_t bytes, int root) {
    return comm_broadcast(d->impl, buf, bytes, root);
}

static const char *host_error(const devcomm *d) { return comm_error(d->impl); }

static int host_alloc(devcomm *d, size_t bytes, void **out, char *why, size_t whylen) {
    return comm_alloc(d->impl, bytes, out, why, whylen);
}

static void host_free(devcomm *d, void *p) { comm_free(d->impl, p); }

static void host_destroy(devcomm *d) { free(d); }

static const devcomm_ops host_ops = {
    .name = "tcp",
    .allreduce_sum_async = host_allreduce_async,
    .wait = host_wait,
    .sync = host_sync,
    .broadcast = host_broadcast,
    .error = host_error,
    .alloc = host_alloc,
    .free = host_free,
    .destroy = host_destroy,
};

int devcomm_host_create(comm *c, devcomm **out) {
    devcomm *d = calloc(1, sizeof *d);
    if (!d) return -ENOMEM;
    *d = (devcomm){.ops = &host_ops, .rank = comm_rank(c), .world = comm_world(c), .impl = c};
    *out = d;
    return 0;
}
