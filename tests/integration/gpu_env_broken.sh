#!/usr/bin/env bash
# timeout: 120
# A GPU that CUDA cannot use is said to be one, never taken for "no GPU":
# a stand-in libcuda.so.1 (built here; its cuInit fails, as a driver older
# than our CUDA runtime or a mismatched libcuda does) put first on
# LD_LIBRARY_PATH, and then:
#  1. gpu-ops --device-count exits 1 naming cudaGetDeviceCount's error;
#  2. the GPU tests' gate (tests/lib/gpu.bash) fails instead of skipping;
#  3. ddp-train --device auto stops with that error rather than training on
#     the CPU, and so does --device cuda;
#  4. ddp-train --device cpu still trains.
# Needs a build with CUDA (the stand-in replaces the driver under it);
# skips without one.
source "$(dirname "$0")/../lib/train.bash"
[ -x "$ROOT/build/tests/gpu-ops" ] || { echo "skipped: built without CUDA (no build/tests/gpu-ops): nothing calls libcuda"; exit 77; }
command -v cc > /dev/null || { echo "skipped: no C compiler for the stand-in libcuda"; exit 77; }
fake=$SCRATCH/fake
mkdir -p "$fake"
cat > "$fake/libcuda.c" <<'CEOF'
/* CUDA_ERROR_NOT_INITIALIZED from everything: a driver CUDA cannot use. */
int cuInit(unsigned flags) { (void)flags; return 3; }
int cuDriverGetVersion(int *v) { *v = 11040; return 0; }
int cuGetProcAddress_v2(const char *s, void **p, int v, unsigned long long f, int *st) {
    (void)s, (void)v, (void)f;
    *p = 0;
    if (st) *st = 0;
    return 3;
}
CEOF
cc -shared -fPIC -o "$fake/libcuda.so.1" "$fake/libcuda.c" || { echo "FAIL: cannot build the stand-in libcuda"; exit 1; }
export LD_LIBRARY_PATH=$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

rc=0
"$ROOT/build/tests/gpu-ops" --device-count > "$SCRATCH/count.out" 2> "$SCRATCH/count.err" || rc=$?
if [ $rc -ne 1 ] || ! grep -q "CUDA cannot use its GPUs: cudaGetDeviceCount failed with cudaError" "$SCRATCH/count.err"; then
    echo "FAIL: gpu-ops --device-count exited $rc without naming the driver's error"; cat "$SCRATCH/count.err"; exit 1
fi
echo "gpu-ops: $(cut -c1-160 "$SCRATCH/count.err")..."

rc=0
"$ROOT/tests/gpu/gpu_ops.sh" > "$SCRATCH/gate.out" 2>&1 || rc=$?
if [ $rc -ne 1 ] || ! grep -q "FAIL: CUDA cannot use this machine's GPU" "$SCRATCH/gate.out"; then
    echo "FAIL: tests/gpu/gpu_ops.sh exited $rc (77 is a skip): the broken driver passed as no GPU"
    cat "$SCRATCH/gate.out"; exit 1
fi
echo "tests/gpu gate: fails (exit 1), does not skip"

args=(--data synthetic --input-shape 1x16x16 --model resnet20 --batch-size 4 --max-steps 2
      --no-eval --threads 1)
for dev in auto cuda; do
    rc=0
    ddp-train "${args[@]}" --device "$dev" > "$SCRATCH/$dev.log" 2>&1 || rc=$?
    if [ $rc -eq 0 ] || ! grep -q -- "--device $dev: this machine has an NVIDIA driver, but CUDA cannot use its GPUs" "$SCRATCH/$dev.log"; then
        echo "FAIL: --device $dev exited $rc without the driver's error"; cat "$SCRATCH/$dev.log"; exit 1
    fi
    grep -q "step 2" "$SCRATCH/$dev.log" && { echo "FAIL: --device $dev trained anyway"; exit 1; }
done
echo "ddp-train --device auto and cuda: stop with the driver's error"
ddp-train "${args[@]}" --device cpu > "$SCRATCH/cpu.log" 2>&1 ||
    { echo "FAIL: --device cpu does not train beside a broken driver"; cat "$SCRATCH/cpu.log"; exit 1; }
echo "ddp-train --device cpu: trains"
