/* The CUDA backend's entry points in a build without CUDA (no nvcc, cuDNN
 * or NCCL at build time): the Makefile links this file instead of
 * worker/backend/cuda/, so asking for a GPU fails with a message that says
 * why. worker/comm/nonccl/ does the same for NCCL. */
#include <errno.h>
#include <stdio.h>

#include "worker/backend/backend.h"
#include "worker/backend/jpeg_decoder.h"

int cuda_device_count(char *why, size_t len) {
    if (why && len) why[0] = 0;
    return 0;
}

int cuda_backend_create(const backend_opts *o, backend **out, char *err, size_t errlen) {
    (void)o;
    *out = NULL;
    snprintf(err, errlen,
             "this ddp-train was built without CUDA (nvcc, cuDNN and NCCL were not found "
             "when it was built); use --device cpu, or rebuild on a machine with the CUDA "
             "toolkit");
    return -ENOTSUP;
}

/* No CUDA backend exists in this build, so this decoder is never asked
 * for; it stands in so that jpeg_decoder.c's table links. */
static int no_jpeg_create(jpeg_decoder *d, char *err, size_t errlen) {
    (void)d;
    snprintf(err, errlen, "this ddp-train was built without CUDA: --decode gpu needs a GPU");
    return -ENOTSUP;
}

const jpeg_decoder_ops cuda_jpeg_decoder = {.name = "nvJPEG (not in this build)",
                                            .create = no_jpeg_create};
