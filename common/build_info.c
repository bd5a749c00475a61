/* See build_info.h. DDPRUN_VERSION comes from the build (the Makefile
 * writes it into build/gen/ddprun_version.h); the libraries' versions
 * from their headers, where the build has them (DDPRUN_CUDA). */
#include "common/build_info.h"

#include <string.h>

#include <ddprun_version.h> /* (made by the build: build/gen) */
#include <oneapi/dnnl/dnnl_version.h>
#ifdef DDPRUN_CUDA
#include <cuda_runtime_api.h>
#include <cudnn_version.h>
#include <nccl.h>
#endif

const char *build_version(void) { return DDPRUN_VERSION; }

void build_libs_get(build_libs *out) {
    memset(out, 0, sizeof *out);
#ifdef DDPRUN_CUDA
    snprintf(out->cuda, sizeof out->cuda, "%d.%d", CUDART_VERSION / 1000,
             CUDART_VERSION % 1000 / 10);
    snprintf(out->cudnn, sizeof out->cudnn, "%d.%d.%d", CUDNN_MAJOR, CUDNN_MINOR,
             CUDNN_PATCHLEVEL);
    snprintf(out->nccl, sizeof out->nccl, "%d.%d.%d", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
#endif
    snprintf(out->onednn, sizeof out->onednn, "%d.%d.%d", DNNL_VERSION_MAJOR, DNNL_VERSION_MINOR,
             DNNL_VERSION_PATCH);
}

void build_options(char *out, size_t len) {
    build_libs l;
    build_libs_get(&l);
    if (l.cuda[0])
        snprintf(out, len, "CUDA %s, cuDNN %s, NCCL %s, oneDNN %s", l.cuda, l.cudnn, l.nccl,
                 l.onednn);
    else
        snprintf(out, len, "cpu only (no CUDA), oneDNN %s", l.onednn);
}

int build_info_print(FILE *f, const char *program) {
    char opts[160];
    build_options(opts, sizeof opts);
    fprintf(f, "%s %s\nbuild: %s\n", program, build_version(), opts);
    return 0;
}
