/* How many GPUs CUDA can use here, and, when it cannot use one that is
 * plainly there, why. "No GPU" and "a GPU that CUDA cannot use" must not
 * look alike: the second is a broken environment (a driver older than
 * our runtime, a missing or mismatched libcuda, a CUDA 12/13 mix), and
 * training quietly on the CPU, or a GPU test that skips, would hide it.
 *
 * A GPU is "plainly there" when the NVIDIA kernel driver is loaded
 * (/proc/driver/nvidia) or its user-space library libcuda.so.1 can be
 * opened: on a machine with neither, the CUDA runtime's complaint only
 * means that this is not a GPU machine. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "worker/backend/cuda/cuda_internal.h"

static int driver_installed(void) {
    if (access("/proc/driver/nvidia/version", F_OK) == 0) return 1;
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!h) return 0;
    dlclose(h);
    return 1;
}

/* What to do about e, in a user's words. */
static const char *remedy(cudaError_t e) {
    switch (e) {
    case cudaErrorInsufficientDriver:
        return "the NVIDIA driver is older than the CUDA runtime this ddp-train was built "
               "with, or its libcuda.so.1 is not the one the driver installed: update the "
               "driver, or check LD_LIBRARY_PATH for a stray libcuda";
    case cudaErrorInitializationError:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
        return "the driver's user-space library (libcuda.so.1) does not match the kernel "
               "driver: `nvidia-smi` should say the same; reinstall the driver, or remove "
               "a second libcuda from LD_LIBRARY_PATH";
    case cudaErrorDevicesUnavailable:
        return "every GPU is in use by another process in exclusive mode, or is being reset";
    default:
        return "`nvidia-smi` and the kernel log (dmesg) usually say why";
    }
}

int cuda_device_count(char *why, size_t len) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (why && len) why[0] = 0;
    if (e == cudaSuccess) return n;
    /* Clear it so it does not linger as the thread's last CUDA error. */
    (void)cudaGetLastError();
    /* No device at all, or CUDA_VISIBLE_DEVICES hides them all: an answer. */
    if (e == cudaErrorNoDevice || !driver_installed()) return 0;
    int rt = 0, drv = 0;
    (void)cudaRuntimeGetVersion(&rt);
    char drv_s[48] = "unknown";
    if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0)
        snprintf(drv_s, sizeof drv_s, "%d.%d", drv / 1000, drv % 1000 / 10);
    (void)cudaGetLastError();
    if (why && len)
        snprintf(why, len, "this machine has an NVIDIA driver, but CUDA cannot use its GPUs: "
                 "cudaGetDeviceCount failed with %s (%s; the driver supports CUDA %s, this "
                 "program's runtime is %d.%d): %s",
                 cudaGetErrorName(e), cudaGetErrorString(e), drv_s, rt / 1000, rt % 1000 / 10,
                 remedy(e));
    return -EIO;
}
