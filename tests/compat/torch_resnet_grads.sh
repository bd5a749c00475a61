#!/usr/bin/env bash
# timeout: 120
# ddp-train's ResNet-20 (and ResNet-18) gradients against PyTorch's on the
# same weights and batch, within 1e-4 relative.
set -euo pipefail
cd "${DDPRUN_ROOT:-$(dirname "$0")/../..}"
if ! /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; then
    echo "skipped: Debian's python3-torch (with numpy) is not installed"; exit 77
fi
dump=build/tests/model-dump
[ -x "$dump" ] || { echo "model-dump is not built"; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for spec in "resnet20 1 28 28 10 16" "resnet20 3 32 32 10 8" "resnet18 3 64 64 7 8"; do
    set -- $spec
    mkdir -p "$dir/$1-$2"
    "$dump" "$@" "$dir/$1-$2"
    echo "== $spec"
    /usr/bin/python3 tests/compat/torch_resnet_grads.py "$dir/$1-$2"
done
