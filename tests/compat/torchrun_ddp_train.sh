#!/usr/bin/env bash
# timeout: 120
# ddp-train under Debian's torchrun (torch 1.13): two ranks train a few
# steps through torchrun's own store, which speaks only torch 1.13's
# protocol generation (DDPRUN_STORE_PROTOCOL=1.13 tells our client so).
set -euo pipefail
cd "${DDPRUN_ROOT:-$(dirname "$0")/../..}"
/usr/bin/python3 -c 'import torch.distributed.run' 2>/dev/null || {
    echo "skipped: Debian's python3-torch is not installed"; exit 77; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
DDPRUN_STORE_PROTOCOL=1.13 /usr/bin/python3 -m torch.distributed.run --nnodes 1 \
    --nproc_per_node 2 --rdzv_backend c10d --rdzv_endpoint "127.0.0.1:$port" --no_python \
    --redirects 2 --tee 1 build/bin/ddp-train --data synthetic --input-shape 3x16x16 \
    --synthetic-size 512 --batch-size 8 --max-steps 3 --threads 1 --no-eval --log-every 1 \
    > "$log" 2>&1 || { cat "$log"; exit 1; }
grep -q "\[default0\]:done: 3 steps" "$log" || { cat "$log"; exit 1; }
