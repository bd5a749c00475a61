# Sourced by the GPU scenarios (tests/gpu): sets GPUS to the GPUs CUDA can
# use, skips (77) only where there is no GPU at all, and fails where
# nvidia-smi sees a GPU that CUDA cannot use or this build cannot drive:
# a broken driver or a build without CUDA on a GPU machine must never pass
# as "skipped".
smi_gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
smi_gpus=${smi_gpus:-0}
if [ ! -x "$ROOT/build/tests/gpu-ops" ]; then
    if [ "$smi_gpus" -gt 0 ]; then
        echo "FAIL: nvidia-smi sees $smi_gpus GPU(s) but this build has no CUDA (no build/tests/gpu-ops): build where nvcc, cuDNN and NCCL are installed"
        exit 1
    fi
    echo "skipped: built without CUDA (no build/tests/gpu-ops) and no GPU"; exit 77
fi
GPUS=$("$ROOT/build/tests/gpu-ops" --device-count) || { echo "FAIL: CUDA cannot use this machine's GPU (above)"; exit 1; }
if [ "$GPUS" -eq 0 ]; then
    if [ "$smi_gpus" -gt 0 ] && [ "${CUDA_VISIBLE_DEVICES-unset}" = unset ]; then
        echo "FAIL: nvidia-smi sees $smi_gpus GPU(s) but CUDA sees none"; exit 1
    fi
    echo "skipped: no GPU"; exit 77
fi
