/* The checks around every call into the GPU libraries, one family per
 * status type (the CUDA runtime's cudaError_t, cuDNN's cudnnStatus_t,
 * cuBLAS's cublasStatus_t, NCCL's ncclResult_t), in the manner of NCCL's
 * own checks.h: a failure is reported the same way wherever it happens.
 *
 * A failed check logs one line (common/log.h) naming the call, where it
 * was made and the library's own words for the status:
 *
 *     FILE:LINE: CALL: LIBRARY: WORDS
 *
 * and gives a negative errno, by one mapping for all four libraries:
 *
 *     -ENOMEM  the library ran out of memory (cudaErrorMemoryAllocation,
 *              CUDNN_STATUS_ALLOC_FAILED, CUBLAS_STATUS_ALLOC_FAILED);
 *     -EIO     every other failure.
 *
 * The errnos that callers give a meaning of their own (-ENOTSUP, -ESTALE,
 * -ETIMEDOUT) never come from a check: they stay the callers' decisions.
 *
 * The CUDA runtime keeps a failed call's error as the thread's last error,
 * which the next kernel launch's cudaGetLastError would then report as its
 * own failure: a failed CUDA check clears it. (A sticky error, one that
 * has broken the context, cannot be cleared; every later call reports it
 * anyway.) For NCCL, ncclInProgress is not a failure: a non-blocking
 * communicator returns it while it finishes the call in the background,
 * and its owner polls for the outcome.
 *
 * Each family X (CUDA, CUDNN, CUBLAS, NCCL) has four forms. Each evaluates
 * call once, and on success has no other effect.
 *
 *   X_CHECK(call)                  returns the errno from the enclosing
 *                                  function (which therefore returns int);
 *   X_CHECK_GOTO(call, rc, label)  sets rc to the errno and jumps to label,
 *                                  for a function with one cleanup path;
 *   X_CHECK_OR(call, fn, arg)      returns fn(arg, status, errno) from the
 *                                  enclosing function, for an owner that
 *                                  must do more on a failure (the NCCL
 *                                  communicator breaks itself and keeps the
 *                                  library's words for every later call);
 *   X_CHECK_RC(call)               an expression, 0 or the errno, for code
 *                                  that goes on after a failure (freeing,
 *                                  destroying) or keeps only the first.
 *
 * Only worker/backend/cuda/ and worker/comm/nccl/ include this: it needs
 * the libraries' headers. */
#ifndef DDPRUN_WORKER_BACKEND_CUDA_CUDA_CHECK_H
#define DDPRUN_WORKER_BACKEND_CUDA_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <errno.h>
#include <nccl.h>
#include <stddef.h>

/* Called on a failed status only: log the line above and return the
 * errno; the CUDA one also clears the thread's last error. */
int cuda_check_failed_cuda(cudaError_t e, const char *call, const char *file, int line);
int cuda_check_failed_cudnn(cudnnStatus_t s, const char *call, const char *file, int line);
int cuda_check_failed_cublas(cublasStatus_t s, const char *call, const char *file, int line);
int cuda_check_failed_nccl(ncclResult_t r, const char *call, const char *file, int line);

/* NCCL's account of its last error in buf, without its trailing newline
 * ("" when it has none): the detail (often the peer or the network
 * interface) that a status's words lack. NCCL keeps one per process, not
 * per communicator, so it may be an earlier failure's. */
void cuda_check_nccl_last_error(char *buf, size_t len);

/* Which statuses are not failures. */
static inline int cuda_check_ok_cuda(cudaError_t e) { return e == cudaSuccess; }
static inline int cuda_check_ok_cudnn(cudnnStatus_t s) { return s == CUDNN_STATUS_SUCCESS; }
static inline int cuda_check_ok_cublas(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS; }
static inline int cuda_check_ok_nccl(ncclResult_t r) {
    return r == ncclSuccess || r == ncclInProgress;
}

/* The form every check takes: call evaluated once into cuda_check_s_; on
 * a failure, the family's report logs it and gives cuda_check_rc_, and
 * on_fail runs. (The long names keep clear of the caller's own.) */
#define CUDA_CHECK_IMPL_(type, fam, call, text, on_fail)                                       \
    do {                                                                                       \
        type cuda_check_s_ = (call);                                                           \
        if (!cuda_check_ok_##fam(cuda_check_s_)) {                                             \
            int cuda_check_rc_ = cuda_check_failed_##fam(cuda_check_s_, text, __FILE__,         \
                                                         __LINE__);                            \
            on_fail;                                                                           \
        }                                                                                      \
    } while (0)

#define CUDA_CHECK_RETURN_(type, fam, call, text)                                              \
    CUDA_CHECK_IMPL_(type, fam, call, text, return cuda_check_rc_)
#define CUDA_CHECK_GOTO_(type, fam, call, text, rc, label)                                     \
    CUDA_CHECK_IMPL_(type, fam, call, text, (rc) = cuda_check_rc_; goto label)
#define CUDA_CHECK_OR_(type, fam, call, text, fn, arg)                                         \
    CUDA_CHECK_IMPL_(type, fam, call, text, return fn((arg), cuda_check_s_, cuda_check_rc_))

/* The expression form's body, one per family. */
static inline int cuda_check_rc_cuda(cudaError_t e, const char *call, const char *file,
                                     int line) {
    return cuda_check_ok_cuda(e) ? 0 : cuda_check_failed_cuda(e, call, file, line);
}
static inline int cuda_check_rc_cudnn(cudnnStatus_t s, const char *call, const char *file,
                                      int line) {
    return cuda_check_ok_cudnn(s) ? 0 : cuda_check_failed_cudnn(s, call, file, line);
}
static inline int cuda_check_rc_cublas(cublasStatus_t s, const char *call, const char *file,
                                       int line) {
    return cuda_check_ok_cublas(s) ? 0 : cuda_check_failed_cublas(s, call, file, line);
}
static inline int cuda_check_rc_nccl(ncclResult_t r, const char *call, const char *file,
                                     int line) {
    return cuda_check_ok_nccl(r) ? 0 : cuda_check_failed_nccl(r, call, file, line);
}

/* The CUDA runtime (cudaError_t; also our kernels' launchers). */
#define CUDA_CHECK(call) CUDA_CHECK_RETURN_(cudaError_t, cuda, call, #call)
#define CUDA_CHECK_GOTO(call, rc, label)                                                       \
    CUDA_CHECK_GOTO_(cudaError_t, cuda, call, #call, rc, label)
#define CUDA_CHECK_OR(call, fn, arg) CUDA_CHECK_OR_(cudaError_t, cuda, call, #call, fn, arg)
#define CUDA_CHECK_RC(call) cuda_check_rc_cuda((call), #call, __FILE__, __LINE__)

/* cuDNN (cudnnStatus_t). */
#define CUDNN_CHECK(call) CUDA_CHECK_RETURN_(cudnnStatus_t, cudnn, call, #call)
#define CUDNN_CHECK_GOTO(call, rc, label)                                                      \
    CUDA_CHECK_GOTO_(cudnnStatus_t, cudnn, call, #call, rc, label)
#define CUDNN_CHECK_OR(call, fn, arg) CUDA_CHECK_OR_(cudnnStatus_t, cudnn, call, #call, fn, arg)
#define CUDNN_CHECK_RC(call) cuda_check_rc_cudnn((call), #call, __FILE__, __LINE__)

/* cuBLAS (cublasStatus_t). */
#define CUBLAS_CHECK(call) CUDA_CHECK_RETURN_(cublasStatus_t, cublas, call, #call)
#define CUBLAS_CHECK_GOTO(call, rc, label)                                                     \
    CUDA_CHECK_GOTO_(cublasStatus_t, cublas, call, #call, rc, label)
#define CUBLAS_CHECK_OR(call, fn, arg)                                                         \
    CUDA_CHECK_OR_(cublasStatus_t, cublas, call, #call, fn, arg)
#define CUBLAS_CHECK_RC(call) cuda_check_rc_cublas((call), #call, __FILE__, __LINE__)

/* NCCL (ncclResult_t; ncclInProgress passes). */
#define NCCL_CHECK(call) CUDA_CHECK_RETURN_(ncclResult_t, nccl, call, #call)
#define NCCL_CHECK_GOTO(call, rc, label)                                                       \
    CUDA_CHECK_GOTO_(ncclResult_t, nccl, call, #call, rc, label)
#define NCCL_CHECK_OR(call, fn, arg) CUDA_CHECK_OR_(ncclResult_t, nccl, call, #call, fn, arg)
#define NCCL_CHECK_RC(call) cuda_check_rc_nccl((call), #call, __FILE__, __LINE__)

#endif
