/* Every backend's ops table holds every operation of backend.h's list
 * (BACKEND_OPS): the CPU's (oneDNN and reference kernels), its bf16
 * emulation over each, and whatever cuda_backend_create gives here (the
 * no-CUDA stand-in has no table; the CUDA backend's is made from the list
 * and checked again by tests/gpu/gpu_ops.c). */
#include <errno.h>
#include <stdlib.h>

#include "tests/unit/test.h"
#include "worker/backend/backend.h"

static backend *mk(backend_kind kind, backend_precision p) {
    backend_opts o = {.kind = kind, .threads = 1, .precision = p};
    backend *b = NULL;
    char err[256];
    if (backend_create(&o, &b, err, sizeof err) != 0) test_fail(__FILE__, __LINE__, "%s", err);
    return b;
}

/* b's table is complete and b cannot record a step (the CPU records
 * nothing); b is destroyed. */
static void check_cpu(backend *b) {
    const char *missing = backend_missing_op(b->ops);
    if (missing) test_fail(__FILE__, __LINE__, "%s: no %s", b->ops->name, missing);
    CHECK(!b->ops->record_begin && !b->ops->record_end && !b->ops->replay);
    b->ops->destroy(b);
}

TEST(backend_ops_cpu_complete) {
    check_cpu(mk(BACKEND_CPU, PRECISION_FP32));
    check_cpu(mk(BACKEND_CPU_REFERENCE, PRECISION_FP32));
}

TEST(backend_ops_bf16_complete) {
    check_cpu(mk(BACKEND_CPU, PRECISION_BF16));
    check_cpu(mk(BACKEND_CPU_REFERENCE, PRECISION_BF16));
}

/* Without CUDA in the build (the stand-in) or without a visible GPU, no
 * backend comes back and the message says why; on a GPU its table is
 * complete, the recording operations included. */
TEST(backend_ops_cuda_or_stand_in) {
    backend_opts o = {.kind = BACKEND_CUDA, .device = 0, .precision = PRECISION_FP32};
    backend *b = (backend *)&o; /* not NULL, so that a failure must clear it */
    char err[512] = "";
    int rc = cuda_backend_create(&o, &b, err, sizeof err);
    if (rc) {
        CHECK(rc < 0);
        CHECK(b == NULL);
        CHECK(err[0] != 0);
        return;
    }
    const char *missing = backend_missing_op(b->ops);
    if (missing) test_fail(__FILE__, __LINE__, "%s: no %s", b->ops->name, missing);
    CHECK(b->ops->record_begin != NULL);
    b->ops->destroy(b);
}

/* The check itself: a required operation taken out is named, and so is a
 * recording operation missing beside one that is set. */
TEST(backend_ops_missing_is_named) {
    backend *b = mk(BACKEND_CPU, PRECISION_FP32);
    backend_ops ops = *b->ops;
    CHECK(backend_missing_op(&ops) == NULL);
    ops.relu_bwd = NULL;
    CHECK_STR(backend_missing_op(&ops), "relu_bwd");
    ops = *b->ops;
    ops.destroy = NULL;
    CHECK_STR(backend_missing_op(&ops), "destroy");
    ops = *b->ops;
    ops.replay = b->ops->sync; /* any function of its type */
    CHECK_STR(backend_missing_op(&ops), "record_begin");
    b->ops->destroy(b);
}
