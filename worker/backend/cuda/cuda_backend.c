/* The CUDA backend: one device, one stream that every operation is queued
 * on, cuDNN and cuBLAS handles bound to it (cuBLAS loaded by cuda_blas.c),
 * device memory, and the ops table that gathers the operations of
 * cuda_conv.c, cuda_linear.c and cuda_ops.c. The NCCL communicator (nccl_comm.c) reaches the device and
 * the stream through cuda_backend.h. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/backend/cuda/cuda_internal.h"

int cuda_backend_device(const backend *b) { return cuda_state_of(b)->device; }

cudaStream_t cuda_backend_stream(const backend *b) { return cuda_state_of(b)->stream; }

void cuda_backend_written(const backend *b, const void *p, size_t bytes) {
    cuda_weights_written(cuda_state_of(b), p, bytes);
}

void cuda_backend_drop_recording(const backend *b) {
    cuda_state *st = cuda_state_of(b);
    if (!st->graph) return;
    /* An executable graph still in flight is freed once it completes
     * (cuGraphExecDestroy), so no wait: a replay stuck in a collective
     * ends when NCCL's abort stops its kernels. Nothing is left to return
     * a failure to: the check logs it. */
    (void)CUDA_CHECK_RC(cudaGraphExecDestroy(st->graph));
    st->graph = NULL;
}

/* ---- memory operations -------------------------------------------------------------- */

/* The memory operations return nothing (backend.h), so their errors are
 * logged by the check macros and kept: the next sync returns the first. */
static void defer(cuda_state *st, int rc) {
    if (rc && !st->deferred) st->deferred = rc;
}

static int alloc_zeroed(cuda_state *st, size_t bytes, void **out) {
    /* cudaMalloc aligns to 256 bytes, more than the 64 backend.h promises. */
    CUDA_CHECK(cudaMalloc(out, bytes ? bytes : 256));
    int rc = 0;
    CUDA_CHECK_GOTO(cudaMemsetAsync(*out, 0, bytes, st->stream), rc, fail);
    CUDA_CHECK_GOTO(cudaStreamSynchronize(st->stream), rc, fail);
    return 0;
fail:
    cudaFree(*out);
    *out = NULL;
    return rc;
}

static void *cuda_alloc(backend *b, size_t bytes) {
    void *p = NULL;
    if (alloc_zeroed(cuda_state_of(b), bytes, &p)) return NULL;
    return p;
}

/* The weight cache goes too: it cannot tell which of its copies came from
 * p's allocation, and p's addresses may come back from the next alloc. */
static int free_now(cuda_state *st, void *p) {
    /* Queued work may still use p: cudaFree must not run ahead of it. */
    CUDA_CHECK(cudaStreamSynchronize(st->stream));
    CUDA_CHECK(cudaFree(p));
    if (st->graph) st->graph_stale = 1;
    return cuda_weights_clear(st);
}

static void cuda_free(backend *b, void *p) {
    if (p) defer(cuda_state_of(b), free_now(cuda_state_of(b), p));
}

/* Both directions return with the copy done, so the host buffer can be
 * reused at once (the model refills its staging buffers right away). */
static int copy_sync(cuda_state *st, void *dst, const void *src, size_t bytes,
                     enum cudaMemcpyKind kind) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, st->stream));
    CUDA_CHECK(cudaStreamSynchronize(st->stream));
    return 0;
}

static void cuda_upload(backend *b, void *dst, const void *src, size_t bytes) {
    cuda_state *st = cuda_state_of(b);
    cuda_weights_written(st, dst, bytes);
    defer(st, copy_sync(st, dst, src, bytes, cudaMemcpyHostToDevice));
}

/* Queued and left to run: from page-locked memory the copy engine reads
 * the host buffer while the step runs; the caller keeps it unchanged until
 * the next sync (backend.h). */
static void cuda_upload_async(backend *b, void *dst, const void *src, size_t bytes) {
    cuda_state *st = cuda_state_of(b);
    cuda_weights_written(st, dst, bytes);
    defer(st, CUDA_CHECK_RC(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                            st->stream)));
}

static int host_alloc(size_t bytes, void **out) {
    CUDA_CHECK(cudaHostAlloc(out, bytes ? bytes : 64, cudaHostAllocPortable));
    memset(*out, 0, bytes);
    return 0;
}

static void *cuda_alloc_host(backend *b, size_t bytes) {
    void *p = NULL;
    if (host_alloc(bytes, &p)) {
        defer(cuda_state_of(b), -ENOMEM);
        return NULL;
    }
    return p;
}

static void cuda_free_host(backend *b, void *p) {
    cuda_state *st = cuda_state_of(b);
    /* A queued copy may still read it. */
    if (p) defer(st, CUDA_CHECK_RC(cudaStreamSynchronize(st->stream)));
    if (p) defer(st, CUDA_CHECK_RC(cudaFreeHost(p)));
}

static void cuda_download(backend *b, void *dst, const void *src, size_t bytes) {
    cuda_state *st = cuda_state_of(b);
    defer(st, copy_sync(st, dst, src, bytes, cudaMemcpyDeviceToHost));
}

static int zero_async(cuda_state *st, void *p, size_t bytes) {
    CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, st->stream));
    return 0;
}

static void cuda_zero(backend *b, void *p, size_t bytes) {
    cuda_state *st = cuda_state_of(b);
    cuda_weights_written(st, p, bytes);
    defer(st, zero_async(st, p, bytes));
}

static int copy_async(cuda_state *st, void *dst, const void *src, size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st->stream));
    return 0;
}

static void cuda_copy(backend *b, void *dst, const void *src, size_t bytes) {
    cuda_state *st = cuda_state_of(b);
    cuda_weights_written(st, dst, bytes);
    defer(st, copy_async(st, dst, src, bytes));
}

static int cuda_sync(backend *b) {
    cuda_state *st = cuda_state_of(b);
    CUDA_CHECK(cudaStreamSynchronize(st->stream));
    int rc = st->deferred;
    st->deferred = 0;
    return rc;
}

/* ---- recording a step ------------------------------------------------------------------- */

/* Thread-local capture: a call on this thread that cannot be recorded
 * (an allocation, a synchronisation) fails the recording instead of
 * running outside it; other threads (NCCL's) are left alone. The work
 * queued while recording does not run: replay runs it. */
static int cuda_record_begin(backend *b) {
    cuda_state *st = cuda_state_of(b);
    if (st->graph) {
        CUDA_CHECK(cudaStreamSynchronize(st->stream));
        CUDA_CHECK(cudaGraphExecDestroy(st->graph));
        st->graph = NULL;
    }
    cuda_weights_invalidate(st);
    CUDA_CHECK(cudaStreamBeginCapture(st->stream, cudaStreamCaptureModeThreadLocal));
    return 0;
}

static int cuda_record_end(backend *b) {
    cuda_state *st = cuda_state_of(b);
    cudaGraph_t g = NULL;
    int rc = 0;
    CUDA_CHECK_GOTO(cudaStreamEndCapture(st->stream, &g), rc, out);
    /* Node priorities, copied from the streams while recording: NCCL's
     * high-priority stream keeps the buckets ahead of backward's kernels. */
    CUDA_CHECK_GOTO(cudaGraphInstantiateWithFlags(&st->graph, g,
                                                  cudaGraphInstantiateFlagUseNodePriority),
                    rc, out);
    st->graph_stale = 0;
out:
    /* The conversions the recording queued have not run (a replay runs
     * them), yet they marked their copies current: an eager call before
     * the first replay, or after a failed recording, must convert again. */
    cuda_weights_invalidate(st);
    if (g) cudaGraphDestroy(g);
    if (rc) st->graph = NULL;
    return rc;
}

static int cuda_replay(backend *b) {
    cuda_state *st = cuda_state_of(b);
    if (!st->graph || st->graph_stale) return -ESTALE;
    CUDA_CHECK(cudaGraphLaunch(st->graph, st->stream));
    cuda_weights_invalidate(st); /* the replayed optimizer step moved the weights */
    return 0;
}

/* ---- life cycle ------------------------------------------------------------------------ */

static void state_free(cuda_state *st) {
    if (!st) return;
    if (st->stream) cudaStreamSynchronize(st->stream);
    if (st->graph) cudaGraphExecDestroy(st->graph);
    cuda_conv_destroy(st);
    algo_cache_close(st->algos);
    cuda_weights_destroy(st);
    cuda_buf_release(&st->blas_workspace);
    cuda_buf_release(&st->workspace);
    cuda_buf_release(&st->wgrad);
    cuda_buf_release(&st->product);
    cuda_buf_release(&st->partials);
    if (st->cublas) st->blas.destroy(st->cublas);
    cuda_blas_unload(&st->blas);
    if (st->cudnn) cudnnDestroy(st->cudnn);
    if (st->stream) cudaStreamDestroy(st->stream);
    free(st);
}

static void cuda_destroy(backend *b) {
    state_free(cuda_state_of(b));
    free(b);
}

/* The file of timed algorithm choices for this GPU model and these
 * libraries: another model, cuDNN or driver may rank them otherwise. */
static void algo_cache_name(int device, char *name, size_t len) {
    struct cudaDeviceProp p;
    int rt = 0, drv = 0;
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess) snprintf(p.name, sizeof p.name, "gpu");
    (void)cudaGetLastError();
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    snprintf(name, len, "cudnn-algos-%s-sm%d%d-%dsm-cudnn%zu-cudart%d-driver%d.txt", p.name,
             p.major, p.minor, p.multiProcessorCount, cudnnGetVersion(), rt, drv);
    for (char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '.' || *c == '-'))
            *c = '_';
}

/* --cudnn-benchmark's choices from earlier processes on this machine
 * (worker/backend/algo_cache.h). Without them every convolution is timed
 * again, which costs time, never correctness: a cache that cannot be used
 * is a warning. */
static void open_algo_cache(cuda_state *st, const backend_opts *o) {
    if (!o->benchmark || !o->algo_cache) return;
    char name[512], why[1024];
    algo_cache_name(o->device, name, sizeof name);
    int rc = algo_cache_open(o->algo_cache, name, &st->algos, why, sizeof why);
    if (rc) {
        if (o->verbose)
            log_warn("--cudnn-benchmark will time every convolution in every process: %s (set "
                     "--cudnn-cache)", why);
        return;
    }
    if (o->verbose && algo_cache_loaded(st->algos) > 0)
        log_info("cuDNN: %d convolution algorithm choices timed before, from %s",
                 algo_cache_loaded(st->algos), algo_cache_path(st->algos));
}

/* Math modes: fp32 stays fp32 everywhere (cuBLAS's default math keeps full
 * precision; cuDNN's is chosen per algorithm in cuda_conv.c); tf32 lets
 * both use tensor cores on fp32 data. bf16 keeps activations in bf16 and
 * computes in fp32 with tensor cores (cuDNN's bf16 configuration,
 * cublasGemmEx with fp32 compute, which cuBLAS's default math allows). */
static int state_init(cuda_state *st, const backend_opts *o) {
    st->device = o->device;
    st->precision = o->precision;
    st->benchmark = o->benchmark;
    st->act = o->precision == PRECISION_BF16 ? DTYPE_BF16 : DTYPE_F32;
    CUDA_CHECK(cudaSetDevice(o->device));
    /* Non-blocking: nothing queued on the legacy default stream (by a
     * library we do not control) serialises with our work. */
    CUDA_CHECK(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking));
    CUDNN_CHECK(cudnnCreate(&st->cudnn));
    CUDNN_CHECK(cudnnSetStream(st->cudnn, st->stream));
    CUBLAS_CHECK(st->blas.create(&st->cublas));
    CUBLAS_CHECK(st->blas.set_stream(st->cublas, st->stream));
    CUBLAS_CHECK(st->blas.set_math_mode(st->cublas, o->precision == PRECISION_TF32
                                                        ? CUBLAS_TF32_TENSOR_OP_MATH
                                                        : CUBLAS_DEFAULT_MATH));
    /* 32 MiB: what cuBLAS's documentation recommends for Hopper. */
    int rc = cuda_buf_reserve(st, &st->blas_workspace, 32u << 20);
    if (rc) return rc;
    CUBLAS_CHECK(st->blas.set_workspace(st->cublas, st->blas_workspace.p,
                                        st->blas_workspace.bytes));
    rc = cuda_weights_init(st);
    if (rc == 0) open_algo_cache(st, o);
    return rc ? rc : cuda_conv_init(st);
}

/* The table, from backend.h's list: every operation NAME is cuda_NAME,
 * from this file, cuda_conv.c, cuda_linear.c or cuda_ops.c, so one left
 * out fails to compile rather than leaving a NULL. */
#define ENTRY(KIND, RET, NAME, PARAMS, ARGS) .NAME = cuda_##NAME,
static const backend_ops cuda_ops = {
    .name = "cuda (cuDNN, cuBLAS)",
    BACKEND_OPS(ENTRY)
};
#undef ENTRY

/* bf16 tensor cores (and cuDNN's bf16 convolutions) start with Ampere. */
static int check_bf16(int device, char *err, size_t errlen) {
    int major = 0, minor = 0, rc = 0;
    CUDA_CHECK_GOTO(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
                    rc, fail);
    CUDA_CHECK_GOTO(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
                    rc, fail);
    if (major < 8) {
        snprintf(err, errlen, "--precision bf16 needs a GPU of compute capability 8.0 (Ampere) "
                              "or newer; CUDA device %d is %d.%d: use --precision fp32",
                 device, major, minor);
        return -ENOTSUP;
    }
    return 0;
fail:
    snprintf(err, errlen, "cannot read CUDA device %d's compute capability (the log above says "
                          "why)", device);
    return rc;
}

/* What is wrong with the request, before touching the device; 0 if fine. */
static int check_request(const backend_opts *o, char *err, size_t errlen) {
    int n = cuda_device_count(err, errlen);
    if (n < 0) return n;
    if (n == 0) {
        snprintf(err, errlen, "--device cuda: no GPU is visible (no CUDA driver, no device, "
                              "or CUDA_VISIBLE_DEVICES hides them all); use --device cpu");
        return -ENODEV;
    }
    if (o->device < 0 || o->device >= n) {
        snprintf(err, errlen, "CUDA device %d does not exist: %d visible (0..%d)", o->device,
                 n, n - 1);
        return -ENODEV;
    }
    return o->precision == PRECISION_BF16 ? check_bf16(o->device, err, errlen) : 0;
}

/* cuBLAS, and cuDNN's parts, which cuDNN 9 opens itself at its first
 * calls (only their loading is done here: dlopen of a library already
 * loaded returns it, and these references stay to the process's end). */
typedef struct {
    cuda_blas *bl;
    pthread_t thread;
    int rc;
    char err[512];
} library_load;

static void *load_libraries(void *arg) {
    library_load *ld = arg;
    static const char *cudnn_parts[] = {"libcudnn_graph.so." STR(CUDNN_MAJOR),
                                        "libcudnn_engines_precompiled.so." STR(CUDNN_MAJOR),
                                        "libcudnn_engines_runtime_compiled.so." STR(CUDNN_MAJOR),
                                        "libcudnn_heuristic.so." STR(CUDNN_MAJOR),
                                        "libcudnn_ops.so." STR(CUDNN_MAJOR),
                                        "libcudnn_cnn.so." STR(CUDNN_MAJOR)};
    ld->rc = cuda_blas_load(ld->bl, ld->err, sizeof ld->err);
    for (size_t i = 0; ld->rc == 0 && i < sizeof cudnn_parts / sizeof *cudnn_parts; i++)
        (void)dlopen(cudnn_parts[i], RTLD_LAZY | RTLD_LOCAL); /* (a missing one: cuDNN says) */
    return NULL;
}

int cuda_backend_create(const backend_opts *o, backend **out, char *err, size_t errlen) {
    *out = NULL;
    int rc = check_request(o, err, errlen);
    if (rc) return rc;
    backend *b = calloc(1, sizeof *b);
    cuda_state *st = calloc(1, sizeof *st);
    if (!b || !st) {
        free(b), free(st);
        snprintf(err, errlen, "out of memory creating the CUDA backend");
        return -ENOMEM;
    }
    /* The libraries load on a thread while the device's context is made
     * here: a restarted worker's first step comes that much sooner. */
    library_load ld = {.bl = &st->blas};
    int threaded = pthread_create(&ld.thread, NULL, load_libraries, &ld) == 0;
    if (threaded) {
        (void)CUDA_CHECK_RC(cudaSetDevice(o->device)); /* (state_init says if it fails) */
        (void)CUDA_CHECK_RC(cudaFree(NULL));            /* the context, made now */
        pthread_join(ld.thread, NULL);
    } else {
        load_libraries(&ld);
    }
    if ((rc = ld.rc)) {
        snprintf(err, errlen, "%s", ld.err);
        free(b), free(st);
        return rc;
    }
    rc = state_init(st, o);
    if (rc) {
        state_free(st);
        free(b);
        snprintf(err, errlen, "cannot set up CUDA device %d (stream, cuDNN or cuBLAS; the "
                              "log above says which call failed)", o->device);
        return rc;
    }
    b->ops = &cuda_ops;
    b->kind = BACKEND_CUDA;
    b->act = st->act;
    b->threads = 1;
    b->impl = st;
    *out = b;
    return 0;
}
