#!/usr/bin/env bash
# timeout: 300
# The GPU pre-flight (scripts/gpu-preflight, tests/gpu/preflight.c) passes:
# versions read, a training step of ResNet-20 and ResNet-50 in fp32, tf32
# and bf16 with every convolution shape having an algorithm in every
# direction, NCCL across two GPUs where there are two, and a verdict line
# that says OK. Skips (77) only on a machine without a GPU.
set -u
ROOT=${DDPRUN_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
source "$ROOT/tests/lib/gpu.bash"
out=$("$ROOT/build/tests/gpu-preflight" 2>&1); rc=$?
echo "$out"
[ $rc -eq 0 ] && tail -n 1 <<< "$out" | grep -q "^preflight: OK" || { echo "FAIL: the pre-flight exited $rc"; exit 1; }
