/* Choosing the compute backend (see backend.h): the CPU's or the CUDA
 * one, by request or, with BACKEND_AUTO, by what this build and machine
 * have. */
#include "worker/backend/backend.h"

#include <errno.h>
#include <stdio.h>

/* TF32 is a tensor-core format: the CPU has no such thing. bf16 is
 * emulated (cpu_bf16.c). */
static int cpu_create(const backend_opts *o, backend **out, char *err, size_t errlen) {
    if (o->precision == PRECISION_TF32) {
        snprintf(err, errlen, "--precision tf32 needs a GPU (--device cuda); the CPU backend "
                 "computes in fp32 (or emulates bf16)");
        return -EINVAL;
    }
    backend *fp32;
    int rc = cpu_backend_create(o->kind == BACKEND_CPU_REFERENCE, o->threads, &fp32, err, errlen);
    if (rc || o->precision != PRECISION_BF16) {
        *out = rc ? NULL : fp32;
        return rc;
    }
    if ((rc = cpu_bf16_backend_create(fp32, out))) {
        fp32->ops->destroy(fp32);
        snprintf(err, errlen, "out of memory creating the bf16 CPU backend");
    }
    return rc;
}

int backend_create(const backend_opts *o, backend **out, char *err, size_t errlen) {
    switch (o->kind) {
    case BACKEND_AUTO: {
        /* A GPU that CUDA cannot use is an error here too: training on
         * the CPU instead would hide the broken driver for hours. */
        int gpus = cuda_device_count(err, errlen);
        if (gpus < 0) return gpus;
        if (gpus > 0) return cuda_backend_create(o, out, err, errlen);
    }
        /* fall through */
    case BACKEND_CPU:
    case BACKEND_CPU_REFERENCE: return cpu_create(o, out, err, errlen);
    case BACKEND_CUDA: return cuda_backend_create(o, out, err, errlen);
    }
    snprintf(err, errlen, "unknown backend kind %d", (int)o->kind);
    return -EINVAL;
}
