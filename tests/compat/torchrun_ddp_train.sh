#!/usr/bin/env bash
# timeout: 120
# ddp-train under PyTorch's own torchrun (TORCH_PY's torch, see
# tests/lib/torch.bash): two ranks train a few steps through torchrun's own
# store. torch 1.13's store speaks only its own protocol generation, which
# our client cannot detect, so there DDPRUN_STORE_PROTOCOL=1.13 tells it;
# torch 2.x's store speaks the current one, our client's default.
set -euo pipefail
cd "${DDPRUN_ROOT:-$(dirname "$0")/../..}"
skip() { echo "$*"; exit 77; }
# shellcheck source=tests/lib/torch.bash
. tests/lib/torch.bash
need_torch torch.distributed.run
unset DDPRUN_STORE_PROTOCOL
[ "$TORCH_MAJOR" = 1 ] && export DDPRUN_STORE_PROTOCOL=1.13
log=$(mktemp)
trap 'rm -f "$log"' EXIT
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$TORCH_PY" -m torch.distributed.run --nnodes 1 \
    --nproc_per_node 2 --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$port" --no_python \
    --redirects 2 --tee 1 build/bin/ddp-train --data synthetic --input-shape 3x16x16 \
    --synthetic-size 512 --batch-size 8 --max-steps 3 --threads 1 --no-eval --log-every 1 \
    > "$log" 2>&1 || { cat "$log"; exit 1; }
grep -q "\[default0\]:done: 3 steps" "$log" || { cat "$log"; exit 1; }
