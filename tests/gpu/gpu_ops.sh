#!/usr/bin/env bash
# timeout: 180
# Every operation of the CUDA backend against the CPU backend's on random
# inputs (build/tests/gpu-ops, from tests/gpu/gpu_ops.c): one line per
# check, fp32 results within 1e-5 of the CPU's relative to each tensor's
# scale, exact where both add in the same order; then the same in bf16
# mixed precision against the CPU's emulated bf16, within 1e-2 where a
# result passes through bf16. The weight cache is checked on its own.
#
# Skips (77) only on a machine without a GPU (tests/lib/gpu.bash).
set -u
ROOT=${DDPRUN_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
source "$ROOT/tests/lib/gpu.bash"
exec "$ROOT/build/tests/gpu-ops"
