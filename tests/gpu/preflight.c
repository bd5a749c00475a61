/* gpu-preflight: the first minute on a GPU machine. Says, before anything
 * long runs, whether this build can train here and what it will use:
 *
 *   1. the driver's and the runtime's CUDA versions, cuDNN's and NCCL's,
 *      and each GPU (name, compute capability, memory, multiprocessors);
 *   2. every GPU library the process loaded, with the file it came from
 *      (a cu12 cuDNN beside cudart 13 shows here, not as a crash later);
 *   3. one training step of ResNet-20 (3x32x32, batch 512) and ResNet-50
 *      (3x224x224, batch 256) in fp32, tf32 and bf16 through the CUDA
 *      backend itself, then cuDNN's candidate algorithms for every
 *      convolution shape and direction those steps ran, and the one used;
 *   4. with two GPUs or more, an all-reduce across two of them with NCCL,
 *      its result checked;
 *
 * and ends with one line, "preflight: OK ..." or "preflight: FAIL ...".
 * Exit 0 when everything works, 1 when anything fails, and 77 (skip) only
 * where the machine has no NVIDIA GPU at all: a GPU that CUDA cannot use
 * is a failure. scripts/gpu-preflight runs it with the carried libraries. */
#include <errno.h>
#include <cudnn.h>
#include <dirent.h>
#include <link.h>
#include <math.h>
#include <nccl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/rng.h"
#include "worker/backend/backend.h"
#include "worker/backend/bf16.h"
#include "worker/backend/cuda/cuda_backend.h"
#include "worker/model/arch.h"

/* What went wrong, for the verdict line. */
typedef struct {
    char what[2048];
    int failures;
} verdict;

static void fail(verdict *v, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    printf("FAIL: %s\n", line);
    size_t used = strlen(v->what);
    snprintf(v->what + used, sizeof v->what - used, "%s%s", v->failures++ ? "; " : "", line);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Whether the kernel driver lists a GPU (an entry in /proc/driver/nvidia/gpus). */
static int driver_sees_gpu(void) {
    DIR *d = opendir("/proc/driver/nvidia/gpus");
    if (!d) return 0;
    struct dirent *e;
    int any = 0;
    while (!any && (e = readdir(d)) != NULL) any = e->d_name[0] != '.';
    closedir(d);
    return any;
}

static void versions(void) {
    int drv = 0, rt = 0, nccl = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    ncclGetVersion(&nccl);
    size_t dnn = cudnnGetVersion(), dnn_rt = cudnnGetCudartVersion();
    printf("driver supports CUDA %d.%d; runtime %d.%d; cuDNN %zu.%zu.%zu (built for CUDA "
           "%zu.%zu); NCCL %d.%d.%d\n",
           drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10, dnn / 10000, dnn / 100 % 100,
           dnn % 100, dnn_rt / 1000, dnn_rt % 1000 / 10, nccl / 10000, nccl / 100 % 100,
           nccl % 100);
}

static int devices(int n, verdict *v) {
    for (int d = 0; d < n; d++) {
        struct cudaDeviceProp p;
        cudaError_t e = cudaGetDeviceProperties(&p, d);
        if (e != cudaSuccess) {
            fail(v, "cudaGetDeviceProperties(%d): %s", d, cudaGetErrorString(e));
            continue;
        }
        printf("GPU %d: %s, compute capability %d.%d, %.1f GiB, %d multiprocessors, "
               "PCI %04x:%02x:%02x\n",
               d, p.name, p.major, p.minor, p.totalGlobalMem / 1073741824.0,
               p.multiProcessorCount, p.pciDomainID, p.pciBusID, p.pciDeviceID);
        if (p.major < 9)
            printf("  (this build carries sm_90 code and PTX: on compute capability %d.%d "
                   "the kernels are compiled from PTX at start, if at all)\n",
                   p.major, p.minor);
    }
    return v->failures;
}

static int print_lib(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size, (void)arg;
    static const char *const names[] = {"libcuda.", "libcudart", "libcublas", "libcudnn",
                                        "libnccl", "libnvrtc", "libnvJitLink", "libcupti"};
    const char *path = info->dlpi_name, *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strncmp(base, names[i], strlen(names[i])) == 0) printf("  %s\n", path);
    return 0;
}

typedef struct {
    const char *model;
    int c, h, w, classes, batch;
} workload;

/* One step, timed on its second run (the first chooses algorithms). */
static void model_step(backend *be, const workload *wl, const char *mode, verdict *v) {
    char err[512];
    model *m = NULL;
    model_spec ms = {.arch = wl->model, .in_c = wl->c, .in_h = wl->h, .in_w = wl->w,
                     .classes = wl->classes, .seed = 1};
    if (arch_build(be, &ms, &m, err, sizeof err)) {
        fail(v, "%s %s: %s", wl->model, mode, err);
        return;
    }
    size_t count = (size_t)wl->batch * wl->c * wl->h * wl->w;
    float *x = malloc(count * sizeof *x);
    int32_t *y = malloc(wl->batch * sizeof *y);
    void *dx = be->ops->alloc(be, count * backend_act_size(be));
    rng_t r;
    rng_seed(&r, 1, 2, 3);
    for (size_t i = 0; x && i < count; i++) x[i] = rng_normal(&r);
    for (int i = 0; y && i < wl->batch; i++) y[i] = (int32_t)rng_below(&r, wl->classes);
    int rc = x && y && dx ? 0 : -ENOMEM;
    if (rc == 0 && be->act == DTYPE_BF16) bf16_from_floats((uint16_t *)x, x, count);
    if (rc == 0) be->ops->upload(be, dx, x, count * backend_act_size(be));
    double t0 = 0, loss = NAN;
    for (int step = 0; step < 2 && rc == 0; step++) {
        if (step == 1) t0 = now_ms();
        void *logits;
        int correct;
        if ((rc = model_set_labels(m, y, wl->batch)) == 0 &&
            (rc = model_forward(m, dx, wl->batch, 1, &logits)) == 0 &&
            (rc = model_backward(m, wl->batch, 0)) == 0)
            rc = model_read_loss(m, &loss, &correct);
    }
    double ms_step = now_ms() - t0;
    if (rc)
        fail(v, "%s %s: a training step failed: %s (the log above says which call)", wl->model,
             mode, strerror(-rc));
    else if (!isfinite(loss))
        fail(v, "%s %s: the loss is %f", wl->model, mode, loss);
    else
        printf("%s %s batch %d: one step in %.1f ms (forward and backward, host sync "
               "included), loss %.4f\n",
               wl->model, mode, wl->batch, ms_step, loss / wl->batch);
    if (dx) be->ops->free(be, dx);
    free(x), free(y);
    model_destroy(m);
}

static void convolutions(verdict *v) {
    static const workload loads[] = {{"resnet20", 3, 32, 32, 10, 512},
                                     {"resnet50", 3, 224, 224, 1000, 256}};
    static const struct {
        backend_precision p;
        const char *name;
    } modes[] = {{PRECISION_FP32, "fp32"}, {PRECISION_TF32, "tf32"}, {PRECISION_BF16, "bf16"}};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        backend_opts o = {.kind = BACKEND_CUDA, .device = 0, .precision = modes[i].p};
        backend *be;
        char err[768];
        if (cuda_backend_create(&o, &be, err, sizeof err)) {
            fail(v, "CUDA backend in %s: %s", modes[i].name, err);
            continue;
        }
        for (size_t k = 0; k < sizeof loads / sizeof loads[0]; k++)
            model_step(be, &loads[k], modes[i].name, v);
        printf("cuDNN's candidates in %s (algorithm/math/workspace, * in use):\n",
               modes[i].name);
        int empty = cuda_backend_conv_report(be, stdout);
        if (empty) fail(v, "%s: %d convolution shapes with a direction cuDNN cannot run",
                        modes[i].name, empty);
        /* While a backend is open: cuBLAS is dlopened by it and closed
         * with it. */
        if (i == 0) {
            printf("libraries loaded:\n");
            dl_iterate_phdr(print_lib, NULL);
        }
        if (be->ops->sync(be)) fail(v, "%s: errors left on the stream", modes[i].name);
        be->ops->destroy(be);
    }
}

#define NCCL_N (1 << 20)

/* Ranks 0 and 1 on GPUs 0 and 1, one process: each adds its rank + 1. */
static void nccl_pair(verdict *v) {
    ncclComm_t comms[2] = {NULL, NULL};
    int devs[2] = {0, 1};
    float *buf[2] = {NULL, NULL};
    cudaStream_t s[2] = {NULL, NULL};
    ncclResult_t nr = ncclCommInitAll(comms, 2, devs);
    if (nr != ncclSuccess) {
        fail(v, "NCCL across GPUs 0 and 1: ncclCommInitAll: %s", ncclGetErrorString(nr));
        return;
    }
    float *host = malloc(NCCL_N * sizeof *host);
    int ok = host != NULL;
    for (int r = 0; r < 2 && ok; r++) {
        ok = cudaSetDevice(r) == cudaSuccess && cudaStreamCreate(&s[r]) == cudaSuccess &&
             cudaMalloc((void **)&buf[r], NCCL_N * sizeof(float)) == cudaSuccess;
        for (int i = 0; ok && i < NCCL_N; i++) host[i] = (float)(r + 1) * (float)(i % 7);
        ok = ok && cudaMemcpy(buf[r], host, NCCL_N * sizeof(float), cudaMemcpyHostToDevice) ==
                       cudaSuccess;
    }
    double t0 = now_ms();
    if (ok) {
        ncclGroupStart();
        for (int r = 0; r < 2; r++)
            nr = ncclAllReduce(buf[r], buf[r], NCCL_N, ncclFloat, ncclSum, comms[r], s[r]);
        ncclResult_t end = ncclGroupEnd();
        if (nr == ncclSuccess) nr = end;
        for (int r = 0; r < 2; r++) ok &= cudaStreamSynchronize(s[r]) == cudaSuccess;
    }
    double ms = now_ms() - t0;
    int wrong = -1;
    for (int r = 0; r < 2 && ok && nr == ncclSuccess; r++) {
        ok = cudaMemcpy(host, buf[r], NCCL_N * sizeof(float), cudaMemcpyDeviceToHost) ==
             cudaSuccess;
        for (int i = 0; ok && i < NCCL_N && wrong < 0; i++)
            if (host[i] != 3.0f * (float)(i % 7)) wrong = i;
    }
    if (!ok || nr != ncclSuccess)
        fail(v, "NCCL all-reduce across GPUs 0 and 1 failed (%s)",
             nr != ncclSuccess ? ncclGetErrorString(nr) : "a CUDA call");
    else if (wrong >= 0)
        fail(v, "NCCL all-reduce across GPUs 0 and 1: element %d is %g, not %g", wrong,
             host[wrong], 3.0 * (wrong % 7));
    else
        printf("NCCL all-reduce of %d floats across GPUs 0 and 1: correct, %.2f ms "
               "(first call: includes set-up)\n", NCCL_N, ms);
    for (int r = 0; r < 2; r++) {
        if (buf[r]) cudaFree(buf[r]);
        if (s[r]) cudaStreamDestroy(s[r]);
        if (comms[r]) ncclCommDestroy(comms[r]);
    }
    free(host);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    log_init("gpu-preflight");
    verdict v = {.what = "", .failures = 0};
    char why[768];
    versions();
    int n = cuda_device_count(why, sizeof why);
    if (n < 0) {
        printf("preflight: FAIL: %s\n", why);
        return 1;
    }
    if (n == 0) {
        if (driver_sees_gpu()) {
            printf("preflight: FAIL: the NVIDIA driver lists GPUs (/proc/driver/nvidia/gpus) "
                   "but CUDA sees none: is CUDA_VISIBLE_DEVICES hiding them?\n");
            return 1;
        }
        printf("preflight: skipped: no NVIDIA GPU on this machine\n");
        return 77;
    }
    devices(n, &v);
    double t0 = now_ms();
    convolutions(&v);
    printf("(the steps and the algorithm choices took %.1f s)\n", (now_ms() - t0) / 1e3);
    if (n >= 2)
        nccl_pair(&v);
    else
        printf("NCCL across GPUs: not checked, one GPU\n");
    struct cudaDeviceProp p;
    cudaGetDeviceProperties(&p, 0);
    if (v.failures) {
        printf("preflight: FAIL on %s: %s\n", p.name, v.what);
        return 1;
    }
    printf("preflight: OK: %d x %s; the CUDA backend trains ResNet-20 and ResNet-50 in fp32, "
           "tf32 and bf16; %s\n",
           n, p.name, n >= 2 ? "NCCL all-reduces across two GPUs" : "NCCL not checked (one GPU)");
    return 0;
}
