/* The failure side of the GPU libraries' checks (cuda_check.h): one log
 * line per failed call, in each library's own words, and the errno the
 * header's mapping gives. */
#include "worker/backend/cuda/cuda_check.h"

#include <stdio.h>
#include <string.h>

#include "common/log.h"

/* cuBLAS is opened with dlopen (cuda_blas.c), so its own string function
 * is not at hand: its statuses by name. */
static const char *cublas_status_name(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    }
    return "unknown cuBLAS status";
}

int cuda_check_failed_cuda(cudaError_t e, const char *call, const char *file, int line) {
    log_error("%s:%d: %s: CUDA: %s (%s)", file, line, call, cudaGetErrorString(e),
              cudaGetErrorName(e));
    (void)cudaGetLastError();
    return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

int cuda_check_failed_cudnn(cudnnStatus_t s, const char *call, const char *file, int line) {
    log_error("%s:%d: %s: cuDNN: %s", file, line, call, cudnnGetErrorString(s));
    return s == CUDNN_STATUS_ALLOC_FAILED ? -ENOMEM : -EIO;
}

int cuda_check_failed_cublas(cublasStatus_t s, const char *call, const char *file, int line) {
    log_error("%s:%d: %s: cuBLAS: %s", file, line, call, cublas_status_name(s));
    return s == CUBLAS_STATUS_ALLOC_FAILED ? -ENOMEM : -EIO;
}

void cuda_check_nccl_last_error(char *buf, size_t len) {
    if (!len) return;
    const char *s = ncclGetLastError(NULL); /* NCCL ignores the communicator */
    snprintf(buf, len, "%s", s ? s : "");
    size_t l = strlen(buf);
    while (l > 0 && (buf[l - 1] == '\n' || buf[l - 1] == ' ')) buf[--l] = 0;
}

/* With NCCL's account of its last error, in parentheses: it may be an
 * earlier failure's. */
int cuda_check_failed_nccl(ncclResult_t r, const char *call, const char *file, int line) {
    char last[512];
    cuda_check_nccl_last_error(last, sizeof last);
    log_error("%s:%d: %s: NCCL: %s%s%s%s", file, line, call, ncclGetErrorString(r),
              last[0] ? " (" : "", last, last[0] ? ")" : "");
    return -EIO;
}
