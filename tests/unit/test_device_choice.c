/* Which device a rank trains on (worker/train/device_choice.c): a shared
 * view of the node's GPUs, a view of its own GPU per rank, too few GPUs,
 * and no GPU, for --device auto, cuda and cpu. */
#include <errno.h>

#include "tests/unit/test.h"
#include "worker/train/device_choice.h"

static device_choice choose(backend_kind k, int gpus, int local_rank, int local_world,
                            int named, int want_rc, char *err) {
    device_request r = {.requested = k, .gpus = gpus, .local_rank = local_rank,
                        .local_world = local_world, .visible_gpus_named = named};
    device_choice d;
    CHECK_EQ(device_choose(&r, &d, err, 512), want_rc);
    return d;
}

TEST(device_choice_shared_view_takes_the_local_rank) {
    char err[512];
    device_choice d = choose(BACKEND_CUDA, 8, 5, 8, -1, 0, err);
    CHECK_EQ(d.kind, BACKEND_CUDA); CHECK_EQ(d.device, 5);
    d = choose(BACKEND_AUTO, 4, 3, 4, 4, 0, err);
    CHECK_EQ(d.kind, BACKEND_CUDA); CHECK_EQ(d.device, 3); CHECK_EQ(d.note[0], 0);
}

/* ddprun --virtual-local-rank and srun --gpus-per-task=1: eight ranks,
 * each seeing one GPU of its own (LOCAL_RANK 0 under the first, 0..7 under
 * the second): each trains on its device 0. */
TEST(device_choice_own_gpu_per_rank) {
    char err[512];
    for (int lr = 0; lr < 8; lr += 7) {
        device_choice d = choose(BACKEND_CUDA, 1, lr, 8, 1, 0, err);
        CHECK_EQ(d.kind, BACKEND_CUDA); CHECK_EQ(d.device, 0);
        d = choose(BACKEND_AUTO, 1, lr, 8, 1, 0, err);
        CHECK_EQ(d.kind, BACKEND_CUDA); CHECK_EQ(d.device, 0);
    }
}

TEST(device_choice_too_few_gpus) {
    char err[512] = "";
    choose(BACKEND_CUDA, 2, 2, 4, -1, -EINVAL, err);
    CHECK(strstr(err, "4 ranks on this node but 2 GPUs are visible") != NULL);
    CHECK(strstr(err, "--virtual-local-rank") != NULL);
    /* One GPU visible to all (CUDA_VISIBLE_DEVICES=0 for everyone is the
     * same view as none): not a per-rank view unless it names one GPU. */
    choose(BACKEND_CUDA, 1, 1, 2, -1, -EINVAL, err);
    CHECK(strstr(err, "2 ranks on this node but 1 GPU is visible") != NULL);
    device_choice d = choose(BACKEND_AUTO, 2, 2, 4, 2, 0, err);
    CHECK_EQ(d.kind, BACKEND_CPU);
    CHECK(strstr(d.note, "training on the CPU") != NULL);
}

TEST(device_choice_cpu_and_no_gpu) {
    char err[512];
    CHECK_EQ(choose(BACKEND_CPU, 8, 0, 1, -1, 0, err).kind, BACKEND_CPU);
    CHECK_EQ(choose(BACKEND_CPU_REFERENCE, 0, 0, 1, -1, 0, err).kind, BACKEND_CPU_REFERENCE);
    CHECK_EQ(choose(BACKEND_AUTO, 0, 0, 2, -1, 0, err).kind, BACKEND_CPU);
    /* --device cuda without a GPU is the backend's own error, said there. */
    CHECK_EQ(choose(BACKEND_CUDA, 0, 0, 1, -1, 0, err).kind, BACKEND_CUDA);
}
