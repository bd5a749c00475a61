/* NCCL's device communicator in a build without CUDA: the Makefile links
 * this file instead of worker/comm/nccl/, so asking for NCCL fails with a
 * message that says why (the CUDA backend fails first in practice: see
 * worker/backend/nocuda/). */
#include <errno.h>
#include <stdio.h>

#include "worker/comm/devcomm.h"

int devcomm_nccl_create(const devcomm_nccl_opts *o, devcomm **out, char *err, size_t errlen) {
    (void)o;
    *out = NULL;
    snprintf(err, errlen, "this ddp-train was built without NCCL");
    return -ENOTSUP;
}

int devcomm_nccl_start(const devcomm_nccl_opts *o, devcomm **pending, char *err,
                       size_t errlen) {
    return devcomm_nccl_create(o, pending, err, errlen);
}

int devcomm_nccl_abort_unfinished(void) { return 0; }
