#!/usr/bin/env bash
# timeout: 240
# ddp-train on the GPU, end to end, without ddprun:
#  1. one step of ResNet-20 on the GPU and on the CPU from the same seed end
#     with the same weights within float32's own spread on this step: 4x
#     the difference between the CPU's oneDNN step and its plain-C
#     reference kernels' step (tests/tools/ckpt_compare.py --spread), and
#     at least 1e-2 of each buffer's scale (two correct float32 steps of
#     this model were seen 3.8e-3 apart; a real bug is O(1)); this catches an
#     operation that reads host memory the GPU never received;
#     the same with algorithms chosen by timing (--cudnn-benchmark), and
#     again in a second process, which takes the first one's timings
#     from --cudnn-cache instead of timing again;
#  2. three steps on the GPU with a checkpoint, resumed on the CPU to step 6
#     and back on the GPU to step 9: checkpoints hold host copies, so they
#     move between backends, and the step counters carry on;
#  3. eight steps replayed from a CUDA graph (recorded at the third) end
#     with the same bits as eight steps run op by op (--no-cuda-graph);
#  4. two bf16 steps on the GPU land near two on the CPU's emulated bf16,
#     within 4x the emulation's own spread (oneDNN against the reference
#     kernels, both emulating bf16).
source "$(dirname "$0")/../lib/train.bash"
source "$(dirname "$0")/../lib/gpu.bash"

common=(--data synthetic --input-shape 3x32x32 --model resnet20 --no-eval --log-every 1
        --batch-size 32 --seed 7 --threads 4 --precision fp32)
train() { # log name, device, checkpoint directory, max steps, more flags...
    local name=$1 device=$2 dir=$3 steps=$4
    shift 4
    ddp-train "${common[@]}" --device "$device" --ckpt-dir "$dir" --max-steps "$steps" "$@" \
        > "$SCRATCH/$name.log" 2>&1 || { echo "FAIL: $name"; cat "$SCRATCH/$name.log"; exit 1; }
    grep -Eq "loss -?(nan|inf)" "$SCRATCH/$name.log" && { echo "FAIL: $name: the loss is NaN"; cat "$SCRATCH/$name.log"; exit 1; }
    grep "^epoch" "$SCRATCH/$name.log" | tail -n 1
}
step_of() { # the newest checkpoint's global_step in a directory (no Python: GPU machines may lack it)
    ddp-train inspect "$1" | sed -n 's/^ *"global_step": *\([0-9]*\).*/\1/p'
}

if have_numpy; then
    train gpu-one cuda "$SCRATCH/gpu-one" 1
    train cpu-one cpu "$SCRATCH/cpu-one" 1
    train ref-one cpu "$SCRATCH/ref-one" 1 --reference-kernels
    # The floor: two correct float32 steps of this model on one CPU (oneDNN
    # and the reference kernels, AVX-512) were seen 3.8e-3 apart.
    spread=(--spread "$SCRATCH/cpu-one" "$SCRATCH/ref-one" --factor 4 --rtol 1e-2)
    compare "$SCRATCH/gpu-one" "$SCRATCH/cpu-one" "${spread[@]}" || { echo "FAIL: GPU and CPU steps differ"; exit 1; }
    train gpu-timed cuda "$SCRATCH/gpu-timed" 1 --cudnn-benchmark --cudnn-cache "$SCRATCH/algos"
    compare "$SCRATCH/gpu-timed" "$SCRATCH/cpu-one" "${spread[@]}" || { echo "FAIL: timed algorithms give another step"; exit 1; }
    # the timings kept: the next process takes them instead of timing again
    [ -s "$(ls "$SCRATCH"/algos/cudnn-algos-*.txt 2> /dev/null | head -n 1)" ] ||
        { echo "FAIL: --cudnn-cache kept no file of timed choices"; ls -la "$SCRATCH/algos"; exit 1; }
    train gpu-cached cuda "$SCRATCH/gpu-cached" 1 --cudnn-benchmark --cudnn-cache "$SCRATCH/algos"
    grep -q "convolution algorithm choices timed before" "$SCRATCH/gpu-cached.log" ||
        { echo "FAIL: the second timed run did not take the kept choices"; cat "$SCRATCH/gpu-cached.log"; exit 1; }
    compare "$SCRATCH/gpu-cached" "$SCRATCH/cpu-one" "${spread[@]}" || { echo "FAIL: the kept algorithms give another step"; exit 1; }
    train gpu-graph cuda "$SCRATCH/graph" 8
    grep -q "from step 3 on, each step replays a CUDA graph" "$SCRATCH/gpu-graph.log" ||
        { echo "FAIL: the steps were not recorded as a CUDA graph"; cat "$SCRATCH/gpu-graph.log"; exit 1; }
    train gpu-eager cuda "$SCRATCH/eager" 8 --no-cuda-graph
    grep -q "CUDA graph" "$SCRATCH/gpu-eager.log" && { echo "FAIL: --no-cuda-graph recorded"; exit 1; }
    compare "$SCRATCH/graph" "$SCRATCH/eager" --exact || { echo "FAIL: replayed steps differ from steps run op by op"; exit 1; }
    train gpu-bf16 cuda "$SCRATCH/gpu-bf16" 2 --precision bf16
    train cpu-bf16 cpu "$SCRATCH/cpu-bf16" 2 --precision bf16
    train ref-bf16 cpu "$SCRATCH/ref-bf16" 2 --precision bf16 --reference-kernels
    # bf16 keeps 8 bits: a value rounded the other way moves by 2^-8, and
    # the gradients sum many of them; a real bug moves them by O(1).
    compare "$SCRATCH/gpu-bf16" "$SCRATCH/cpu-bf16" --spread "$SCRATCH/cpu-bf16" "$SCRATCH/ref-bf16" \
        --factor 4 --rtol 5e-2 || { echo "FAIL: GPU and CPU bf16 steps differ"; exit 1; }
else
    echo "(numpy is missing: the GPU-against-CPU weights comparison is left out)"
fi

ck=$SCRATCH/ck
train gpu-3 cuda "$ck" 3
[ "$(step_of "$ck")" = 3 ] || { echo "FAIL: the GPU run's checkpoint is at step $(step_of "$ck"), not 3"; exit 1; }
train cpu-6 cpu "$ck" 6
grep -q "resuming from .*ckpt-0000000003" "$SCRATCH/cpu-6.log" || { echo "FAIL: the CPU run did not resume the GPU's checkpoint"; cat "$SCRATCH/cpu-6.log"; exit 1; }
[ "$(step_of "$ck")" = 6 ] || { echo "FAIL: the CPU run's checkpoint is at step $(step_of "$ck"), not 6"; exit 1; }
train gpu-9 cuda "$ck" 9
grep -q "resuming from .*ckpt-0000000006" "$SCRATCH/gpu-9.log" || { echo "FAIL: the GPU run did not resume the CPU's checkpoint"; cat "$SCRATCH/gpu-9.log"; exit 1; }
[ "$(step_of "$ck")" = 9 ] || { echo "FAIL: the second GPU run's checkpoint is at step $(step_of "$ck"), not 9"; exit 1; }
echo "GPU -> CPU -> GPU: checkpoints at steps 3, 6, 9"
