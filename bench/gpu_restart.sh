#!/usr/bin/env bash
# make bench-gpu-restart: what a restart costs on a GPU. Seconds from a
# worker's SIGKILL to the first training step after the group restarted,
# ours against torchrun + PyTorch on the same GPU, in one run, taking
# turns: ResNet-50 at 224, batch 256, bf16, one rank, one batch kept on
# the GPU.
#   ours     ddprun --max-restarts 1 + ddp-train --snapshot-every 1 (the
#            resume is from the snapshot in the agent's memory), with the
#            convolution algorithms chosen by timing (--cudnn-benchmark):
#            timed again by the restarted process (--cudnn-cache none), or
#            taken from what the first process timed (--cudnn-cache);
#            and, as a third row, by cuDNN's heuristics;
#   PyTorch  torchrun --max-restarts 1 (the machine's torch) +
#            bench/torch_gpu_restart.py: DDP over NCCL, cudnn.benchmark,
#            torch.save every 10 steps to /dev/shm, loaded at start.
# The kill comes once step KILL_AT (20) is printed; the clock stops when the
# restarted worker prints its first step. Also printed: the steps done
# again (the kill's step less the one resumed from) and, for ours, where
# the restarted process's time went (ddp-train's "first step done" line).
# Goal (the GPU issue): at most 2 s from kill to first step.
#
# Environment: ROUNDS (2; medians), KILL_AT (20), PY (python3 with torch,
# torchvision and CUDA), OURS_FLAGS (more ddp-train flags for every row),
# ROWS (which rows: "nocache bench heur torch").
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
# Under scripts/gpu-env, PyTorch gets the library path it had before.
py=(env LD_LIBRARY_PATH="${GPU_ENV_PY_LD_LIBRARY_PATH-${LD_LIBRARY_PATH:-}}" "$PY")
ROUNDS=${ROUNDS:-2}
KILL_AT=${KILL_AT:-20}
read -r -a extra <<< "${OURS_FLAGS:-}"
nvidia-smi -L > /dev/null 2>&1 || { echo "bench-gpu-restart: no GPU (nvidia-smi -L failed)"; exit 1; }
"${py[@]}" -c 'import torch, torchvision; assert torch.cuda.is_available()' 2> /dev/null ||
    { echo "bench-gpu-restart: $PY has no torch with CUDA and torchvision"; exit 1; }
tmp=$(mktemp -d)
job=
cleanup() {
    [ -n "$job" ] && kill -KILL -- "-$job" 2> /dev/null
    rm -rf "$tmp" /dev/shm/ddprun-bench-restart-$$-*
}
trap cleanup EXIT
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n1)"
echo "torch: $("${py[@]}" -c 'import torch; print(torch.__version__)')"
echo "command: make bench-gpu-restart (ROUNDS=$ROUNDS KILL_AT=$KILL_AT OURS_FLAGS='${OURS_FLAGS:-}')"

ours_cmd() { # NAME MORE-FLAGS...
    local name=$1
    shift
    echo build/bin/ddprun --standalone --nproc-per-node 1 --max-restarts 1 --no-python \
        build/bin/ddp-train --device cuda --model resnet50 --data synthetic \
        --input-shape 3x224x224 --classes 1000 --batch-size 256 --precision bf16 --fixed-batch \
        --no-eval --no-augment --log-every 1 --max-steps 100000 --snapshot-every 1 \
        --ckpt-dir "$tmp/$name" "${extra[@]}" "$@"
}

# run NAME WORKER STEP-REGEX RESUMED-SED CMD...: the job in a process group
# of its own, its worker (the launcher's child named WORKER, a pgrep
# pattern) SIGKILLed after step KILL_AT; the first step line after the
# restarted worker's "resuming from" line stops the clock. Prints
# "SECONDS REDONE".
run() {
    local name=$1 wname=$2 pat=$3 resumed=$4
    shift 4
    local log=$tmp/$name.log
    setsid "$@" > "$log" 2>&1 &
    job=$!
    local i worker lines t0 t1= from done_before
    for i in $(seq 2400); do
        grep -Eq "$pat$KILL_AT[^0-9]" "$log" && break
        kill -0 "$job" 2> /dev/null || break
        sleep 0.05
    done
    worker=$(pgrep -P "$job" "$wname" | head -n 1)
    if ! grep -Eq "$pat$KILL_AT[^0-9]" "$log" || [ -z "$worker" ]; then
        echo "$name: never reached step $KILL_AT" >&2
        tail -n 20 "$log" >&2
        kill -KILL -- "-$job" 2> /dev/null
        wait "$job" 2> /dev/null
        job=
        return 1
    fi
    lines=$(wc -l < "$log")
    t0=$(date +%s%N)
    local t0_day # (the logs' clock: seconds since midnight)
    t0_day=$(date +%H:%M:%S.%N | awk -F: '{printf "%.3f", $1 * 3600 + $2 * 60 + $3}')
    kill -KILL "$worker"
    for i in $(seq 12000); do
        if tail -n +"$((lines + 1))" "$log" | sed -n '/resuming from/,$p' | grep -Eq "$pat[0-9]+[^0-9]"; then
            t1=$(date +%s%N)
            break
        fi
        sleep 0.01
    done
    done_before=$(sed -n '1,/resuming from/p' "$log" | grep -Eo "$pat[0-9]+" | tail -n 1 | grep -Eo '[0-9]+$')
    from=$(sed -n "$resumed" "$log" | head -n 1)
    kill -TERM -- "-$job" 2> /dev/null
    wait "$job" 2> /dev/null
    job=
    [ -n "$t1" ] || { echo "$name: no step after the restart" >&2; tail -n 20 "$log" >&2; return 1; }
    echo "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", (b - a) / 1e9 }') $((done_before - ${from:-0})) $(agent_times "$log" "$lines" "$t0_day")"
}

# agent_times LOG LINES T0: from ddprun's lines after the kill, seconds
# from the kill (T0, seconds since midnight) until the agent said the
# worker failed, started the next one, and that one said its first word
# ("noticed/started/first-word"; "-" where there is no such line).
agent_times() {
    tail -n +"$(($2 + 1))" "$1" | awk -v t0="$3" '
        function at(line) { split(substr(line, 2, 12), h, ":"); return h[1] * 3600 + h[2] * 60 + h[3] - t0 }
        /^\[[0-9:.]+\] ddprun: .*failed/ && !n { n = sprintf("%.2f", at($0)) }
        /^\[[0-9:.]+\] ddprun: started/ && n && !s { s = sprintf("%.2f", at($0)) }
        /^\[[0-9:.]+\] ddp-train: / && s && !w { w = sprintf("%.2f", at($0)) }
        END { printf "%s/%s/%s", n ? n : "-", s ? s : "-", w ? w : "-" }'
}

ours_pat='^epoch [0-9]+/[0-9]+ step '
ours_from='s/.*resuming from .*: epoch [0-9]*, step \([0-9]*\) .*/\1/p'
theirs_pat='(^|:)step '
theirs_from='s/^.*resuming from step \([0-9]*\).*/\1/p'
median() { sort -n | awk '{a[NR]=$1} END{if (NR) print a[int((NR+1)/2)]; else print "-"}'; }

declare -A secs redone
read -r -a rows <<< "${ROWS:-nocache bench heur torch}"
for r in $(seq "$ROUNDS"); do
    for side in "${rows[@]}"; do
        case $side in
            nocache) read -r -a cmd <<< "$(ours_cmd "nocache$r" --cudnn-benchmark --cudnn-cache none)"
                   w=ddp-train; p=$ours_pat; f=$ours_from ;;
            bench) read -r -a cmd <<< "$(ours_cmd "bench$r" --cudnn-benchmark --cudnn-cache "$tmp/algos")"
                   w=ddp-train; p=$ours_pat; f=$ours_from ;;
            heur) read -r -a cmd <<< "$(ours_cmd "heur$r")"; w=ddp-train; p=$ours_pat; f=$ours_from ;;
            torch) cmd=("${py[@]}" -m torch.distributed.run --standalone --nproc_per_node 1
                        --max_restarts 1 bench/torch_gpu_restart.py
                        --snapshot "/dev/shm/ddprun-bench-restart-$$-$r.pt")
                   w=python; p=$theirs_pat; f=$theirs_from ;;
        esac
        out=$(run "$side$r" "$w" "$p" "$f" "${cmd[@]}") || continue
        read -r s d a <<< "$out"
        secs[$side]+="$s "
        redone[$side]+="$d "
        extra_line=""
        [ "$side" != torch ] &&
            extra_line=$(grep -o "first step done .*" "$tmp/$side$r.log" | tail -n 1)
        echo "round $r $side: kill to first step $s s, $d steps done again${extra_line:+; the agent noticed/restarted/its worker spoke at +$a s; restarted worker: $extra_line}"
    done
done

echo
echo "| side | kill to first step, s (median of $ROUNDS) | steps done again |"
echo "| --- | ---: | ---: |"
for side in "${rows[@]}"; do
    case $side in
        nocache) label="ours, --cudnn-benchmark, timed again" ;;
        bench) label="ours, --cudnn-benchmark, --cudnn-cache" ;;
        heur) label="ours, cuDNN's heuristics" ;;
        torch) label="torchrun + PyTorch (cudnn.benchmark)" ;;
    esac
    echo "| $label | $(printf '%s\n' ${secs[$side]:-} | median) | $(printf '%s\n' ${redone[$side]:-} | median) |"
done
b=$(printf '%s\n' ${secs[bench]:-} | median)
t=$(printf '%s\n' ${secs[torch]:-} | median)
awk -v b="$b" -v t="$t" 'BEGIN { if (b + 0 > 0 && t + 0 > 0) printf "ours (--cudnn-benchmark) / PyTorch: %.2fx the time; goal: at most 2 s\n", b / t }'
