#!/usr/bin/env bash
# How often a two-rank torch.distributed script aborts at its end, under
# ddprun and under torchrun side by side (bench/exit_abort.py: one gloo
# all_reduce; without and with dist.destroy_process_group()): the
# SIGABRT "terminate called without an active exception" is torch's
# (its process group's threads still running as the interpreter ends),
# the same under either launcher. RUNS runs of each (default 20), --tee 3
# as users run it; TORCH_PY: the python whose torch runs the script
# (today's torch: build/torch2-venv/bin/python, scripts/torch2-venv).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
RUNS=${RUNS:-20}
TORCH_PY=${TORCH_PY:-/usr/bin/python3}
export PATH=$PWD/build/bin:$PATH PYTHON_EXEC=$TORCH_PY
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "torch $("$TORCH_PY" -c 'import torch; print(torch.__version__)'), $RUNS runs each, --tee 3"
printf '%-9s %-22s %8s %8s\n' launcher script aborted failed
for destroy in "" --destroy; do
    for launcher in ddprun torchrun; do
        aborted=0 failed=0
        for ((i = 0; i < RUNS; i++)); do
            if [ "$launcher" = ddprun ]; then
                ddprun --standalone --nproc-per-node=2 --tee 3 bench/exit_abort.py $destroy \
                    > "$out/log" 2>&1
            else
                "$TORCH_PY" -m torch.distributed.run --standalone --nproc-per-node=2 --tee 3 \
                    bench/exit_abort.py $destroy > "$out/log" 2>&1
            fi
            [ $? -eq 0 ] || failed=$((failed + 1))
            grep -q "terminate called without an active exception" "$out/log" && aborted=$((aborted + 1))
        done
        printf '%-9s %-22s %8s %8s\n' "$launcher" "exit_abort.py${destroy:+ $destroy}" \
            "$aborted/$RUNS" "$failed/$RUNS"
    done
done
