/* Choosing the compute backend (see backend.h): the CPU's or the CUDA
 * one, by request or, with BACKEND_AUTO, by what this build and machine
 * have. */
#include "worker/backend.h"

#include <errno.h>
#include <stdio.h>

int backend_create(const backend_opts *o, backend **out, char *err, size_t errlen) {
    switch (o->kind) {
    case BACKEND_AUTO:
        if (cuda_device_count() > 0) return cuda_backend_create(o, out, err, errlen);
        /* fall through */
    case BACKEND_CPU:
    case BACKEND_CPU_REFERENCE:
        if (o->precision == PRECISION_BF16 || o->precision == PRECISION_TF32) {
            snprintf(err, errlen, "--precision %s needs a GPU (--device cuda); the CPU "
                     "backend computes in fp32",
                     o->precision == PRECISION_BF16 ? "bf16" : "tf32");
            return -EINVAL;
        }
        return cpu_backend_create(o->kind == BACKEND_CPU_REFERENCE, o->threads, out, err,
                                  errlen);
    case BACKEND_CUDA: return cuda_backend_create(o, out, err, errlen);
    }
    snprintf(err, errlen, "unknown backend kind %d", (int)o->kind);
    return -EINVAL;
}
