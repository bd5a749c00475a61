/* The CPU backend: host memory, the plain-C kernels, and convolution and
 * the linear layer through oneDNN, or through the reference kernels when
 * a test asks for them. */
#include <errno.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "worker/backend/cpu/cpu_kernels.h"

static void *cpu_alloc(backend *b, size_t bytes) {
    (void)b;
    size_t n = (bytes + 63) / 64 * 64;
    void *p = aligned_alloc(64, n ? n : 64);
    if (p) memset(p, 0, n);
    return p;
}

static void cpu_free(backend *b, void *p) {
    (void)b;
    free(p);
}

static void cpu_copy(backend *b, void *dst, const void *src, size_t bytes) {
    (void)b;
    memcpy(dst, src, bytes);
}

static void cpu_zero(backend *b, void *p, size_t bytes) {
    (void)b;
    memset(p, 0, bytes);
}

static int cpu_sync(backend *b) {
    (void)b;
    return 0;
}

static void cpu_destroy(backend *b) {
    cpu_dnnl_destroy(b);
    free(b);
}

/* The CPU's operations; convolution and the linear layer from oneDNN
 * (KIND dnnl) or from the reference kernels (KIND ref). Written out rather
 * than made from backend.h's list as the CUDA table is: one function
 * serves several operations (cpu_copy is upload, download and copy) and
 * the two tables differ in four. The recording operations stay NULL: the
 * CPU records nothing. A unit test (backend_ops_cpu_complete) names an
 * operation left out. */
#define CPU_OPS(NAME, KIND)                                                                  \
    {                                                                                        \
        .name = NAME, .conv_fwd = cpu_conv_fwd_##KIND, .conv_bwd = cpu_conv_bwd_##KIND,      \
        .linear_fwd = cpu_linear_fwd_##KIND, .linear_bwd = cpu_linear_bwd_##KIND,            \
        .alloc = cpu_alloc, .free = cpu_free, .upload = cpu_copy, .download = cpu_copy,      \
        .upload_async = cpu_copy, .alloc_host = cpu_alloc, .free_host = cpu_free,            \
        .copy = cpu_copy, .zero = cpu_zero, .sync = cpu_sync, .bn_stats = cpu_bn_stats,      \
        .bn_apply = cpu_bn_apply, .bn_finalize = cpu_bn_finalize,                            \
        .bn_running = cpu_bn_running, .bn_bwd_reduce = cpu_bn_bwd_reduce,                    \
        .bn_bwd_apply = cpu_bn_bwd_apply, .relu_fwd = cpu_relu_fwd, .relu_bwd = cpu_relu_bwd, \
        .add_fwd = cpu_add_fwd, .accumulate = cpu_accumulate, .scale = cpu_scale,            \
        .axpy = cpu_axpy,                                                                    \
        .maxpool_fwd = cpu_maxpool_fwd, .maxpool_bwd = cpu_maxpool_bwd,                      \
        .avgpool_fwd = cpu_avgpool_fwd, .avgpool_bwd = cpu_avgpool_bwd, .xent = cpu_xent,    \
        .sgd = cpu_sgd, .destroy = cpu_destroy,                                              \
    }

static const backend_ops cpu_dnnl_ops = CPU_OPS("cpu (oneDNN)", dnnl);
static const backend_ops cpu_ref_ops = CPU_OPS("cpu (reference)", ref);

int cpu_backend_create(int reference, int threads, backend **out, char *err, size_t errlen) {
    backend *b = calloc(1, sizeof *b);
    if (!b) return -ENOMEM;
    b->ops = reference ? &cpu_ref_ops : &cpu_dnnl_ops;
    b->kind = reference ? BACKEND_CPU_REFERENCE : BACKEND_CPU;
    if (threads > 0) omp_set_num_threads(threads);
    b->threads = omp_get_max_threads();
    int rc = cpu_dnnl_init(b, err, errlen);
    if (rc) {
        free(b);
        return rc;
    }
    *out = b;
    return 0;
}
