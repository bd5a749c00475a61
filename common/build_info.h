/* What this build is: its version (from `git describe`-like data at build
 * time, or the VERSION file of a release tarball) and the libraries it was
 * compiled against (CUDA, cuDNN and NCCL, or "cpu only"; oneDNN), for every
 * program's --version, the agent's ddprun_build_info gauge and `ddprun
 * status`. The versions are the headers' the build saw, not the libraries
 * a machine loads at run time. */
#ifndef DDPRUN_COMMON_BUILD_INFO_H
#define DDPRUN_COMMON_BUILD_INFO_H

#include <stdio.h>

/* "0.1.0+git.363b75d" (a build from a checkout; ".dirty" with changes not
 * committed), or "0.1.0" (a release tarball). */
const char *build_version(void);

/* The GPU libraries compiled in: "13.0" and so on, or "" each in a build
 * without CUDA. */
typedef struct {
    char cuda[16], cudnn[16], nccl[16], onednn[16];
} build_libs;
void build_libs_get(build_libs *out);

/* "CUDA 13.0, cuDNN 9.17.1, NCCL 2.28.9, oneDNN 3.0.0", or "cpu only (no
 * CUDA), oneDNN 3.0.0". */
void build_options(char *out, size_t len);

/* `PROGRAM --version`: two lines on f ("ddprun 0.1.0+git.363b75d" and
 * "build: ..."). Returns 0, the exit status. */
int build_info_print(FILE *f, const char *program);

#endif
