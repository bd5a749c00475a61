/* cuBLAS, opened with dlopen when a CUDA backend is created instead of
 * linked. Linked, it would load into every ddp-train process, and its LT
 * library alone costs about 90 MiB of private memory and 0.1 s before main
 * runs: a CPU run would pay that for nothing (and the peak-memory figures
 * of CPU training would double). Only the entry points the linear layer
 * uses are looked up (cublasGemmEx for bf16, which has no _v2 name). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "worker/backend/cuda/cuda_internal.h"

/* The symbol's address into a function pointer (memcpy: ISO C has no
 * conversion from void * to a function pointer; POSIX guarantees the
 * representation is the same). */
static int lookup(cuda_blas *bl, const char *name, void *fn, char *err, size_t errlen) {
    void *p = dlsym(bl->lib, name);
    if (!p) {
        snprintf(err, errlen, "cuBLAS has no %s: %s", name, dlerror());
        return -ENOENT;
    }
    memcpy(fn, &p, sizeof p);
    return 0;
}

int cuda_blas_load(cuda_blas *bl, char *err, size_t errlen) {
    /* The major version the backend was compiled against, then any. */
    const char *names[] = {"libcublas.so." STR(CUBLAS_VER_MAJOR), "libcublas.so"};
    for (int i = 0; i < 2 && !bl->lib; i++) bl->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!bl->lib) {
        snprintf(err, errlen, "cannot load cuBLAS (%s): %s; add the CUDA toolkit's library "
                              "directory to LD_LIBRARY_PATH", names[0], dlerror());
        return -ENOENT;
    }
    /* cublas_v2.h maps the first four names onto these _v2 symbols. */
    int rc = lookup(bl, "cublasCreate_v2", &bl->create, err, errlen);
    if (!rc) rc = lookup(bl, "cublasDestroy_v2", &bl->destroy, err, errlen);
    if (!rc) rc = lookup(bl, "cublasSetStream_v2", &bl->set_stream, err, errlen);
    if (!rc) rc = lookup(bl, "cublasSgemm_v2", &bl->sgemm, err, errlen);
    if (!rc) rc = lookup(bl, "cublasSetMathMode", &bl->set_math_mode, err, errlen);
    if (!rc) rc = lookup(bl, "cublasGemmEx", &bl->gemm_ex, err, errlen);
    if (!rc) rc = lookup(bl, "cublasSetWorkspace_v2", &bl->set_workspace, err, errlen);
    if (rc) cuda_blas_unload(bl);
    return rc;
}

void cuda_blas_unload(cuda_blas *bl) {
    if (bl->lib) dlclose(bl->lib);
    memset(bl, 0, sizeof *bl);
}
