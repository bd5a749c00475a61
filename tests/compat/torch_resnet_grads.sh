#!/usr/bin/env bash
# timeout: 240
# ddp-train's ResNet-20 (and ResNet-18) gradients against PyTorch's float64
# step on the same weights and batch, within 1e-4 relative, near-zero ReLU
# inputs decided as ours did (tests/compat/torch_resnet_grads.py says why;
# PyTorch: TORCH_PY's, see tests/lib/torch.bash). Each case runs under the
# machine's best instruction set and again with oneDNN held to AVX2 and to
# SSE4.1 (ONEDNN_MAX_CPU_ISA), so that a machine with AVX-512 sees what an
# AVX2-only machine will.
set -euo pipefail
cd "${DDPRUN_ROOT:-$(dirname "$0")/../..}"
skip() { echo "$*"; exit 77; }
# shellcheck source=tests/lib/torch.bash
. tests/lib/torch.bash
need_torch numpy
dump=build/tests/model-dump
[ -x "$dump" ] || { echo "model-dump is not built"; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
rc=0
for isa in best AVX2 SSE41; do
    for spec in "resnet20 1 28 28 10 16" "resnet20 3 32 32 10 8" "resnet18 3 64 64 7 8"; do
        set -- $spec
        out=$dir/$isa-$1-$2
        mkdir -p "$out"
        if [ "$isa" = best ]; then "$dump" "$@" "$out"; else ONEDNN_MAX_CPU_ISA=$isa "$dump" "$@" "$out"; fi
        echo "== $spec (oneDNN: ${isa})"
        "$TORCH_PY" tests/compat/torch_resnet_grads.py "$out" || rc=1
    done
done
exit $rc
