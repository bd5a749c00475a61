/* See device_choice.h. */
#include "worker/train/device_choice.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int device_choose(const device_request *r, device_choice *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->kind = r->requested;
    if (r->requested == BACKEND_CPU || r->requested == BACKEND_CPU_REFERENCE) return 0;
    if (r->gpus == 0) {
        /* --device cuda says why itself (cuda_backend_create). */
        if (r->requested == BACKEND_AUTO) out->kind = BACKEND_CPU;
        return 0;
    }
    /* Each rank sees its own GPU: device 0 of its own view is its own. */
    int own_view = r->visible_gpus_named == 1 && r->gpus == 1;
    if (own_view || r->local_world <= r->gpus) {
        out->kind = BACKEND_CUDA;
        out->device = own_view ? 0 : r->local_rank;
        return 0;
    }
    const char *s = r->gpus == 1 ? " is" : "s are";
    if (r->requested == BACKEND_CUDA) {
        snprintf(err, errlen,
                 "%d ranks on this node but %d GPU%s visible to each: NCCL needs a GPU per rank; "
                 "use --nproc-per-node %d, give each rank its own GPU (ddprun "
                 "--virtual-local-rank, srun --gpus-per-task=1), or --device cpu",
                 r->local_world, r->gpus, s, r->gpus);
        return -EINVAL;
    }
    snprintf(out->note, sizeof out->note,
             "%d ranks on this node but %d GPU%s visible to each: training on the CPU "
             "(--device cuda makes this an error)", r->local_world, r->gpus, s);
    out->kind = BACKEND_CPU;
    return 0;
}
