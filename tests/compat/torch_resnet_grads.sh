#!/usr/bin/env bash
# timeout: 120
# ddp-train's ResNet-20 (and ResNet-18) gradients against PyTorch's on the
# same weights and batch, within 1e-4 relative (PyTorch: TORCH_PY's, see
# tests/lib/torch.bash).
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
for spec in "resnet20 1 28 28 10 16" "resnet20 3 32 32 10 8" "resnet18 3 64 64 7 8"; do
    set -- $spec
    mkdir -p "$dir/$1-$2"
    "$dump" "$@" "$dir/$1-$2"
    echo "== $spec"
    "$TORCH_PY" tests/compat/torch_resnet_grads.py "$dir/$1-$2"
done
