#!/usr/bin/env bash
# make wheel: the wheel installs into a fresh virtual environment under
# build/ (pip, offline) and puts ddprun, ddp-train, ddprun-store and
# ddprun-store-cli on its path, and `python -m ddprun`, each saying the
# build's version; the programs load the libraries the wheel carries, not
# the system's; a torch script that keeps its state with ddprun.snapshot,
# run through the installed console script (its workers under the venv's
# Python), loses rank 1 to SIGKILL in step 17 and resumes after step 16,
# ending with the weights of a run never killed; outside ddprun the module
# keeps its snapshots in the directory on disk it is given.
# timeout: 240
# shellcheck source=tests/lib/agent.bash
source "$(dirname "$0")/../lib/agent.bash"
command -v patchelf > /dev/null || skip "skipped: patchelf is missing (scripts/install-deps installs it)"
PY=/usr/bin/python3 # Debian's, whose torch the venv sees (--system-site-packages)
"$PY" -c 'import venv, ensurepip' 2> /dev/null || skip "skipped: python3-venv is missing"
"$PY" -c 'import torch' 2> /dev/null || skip "skipped: python3-torch is missing"

make -s -C "$ROOT" wheel > "$TMP/make.out" 2> "$TMP/make.err" || { cat "$TMP/make.err"; die "make wheel failed"; }
whl=$(tail -n 1 "$TMP/make.out")
whl=$ROOT/$whl
[ -s "$whl" ] || die "make wheel made no wheel ($whl)"
venv=$ROOT/build/wheel-test-venv
rm -rf "$venv"
"$PY" -m venv --system-site-packages "$venv"
trap 'rm -rf "$venv"' EXIT
"$venv/bin/pip" install -q --no-index --no-deps "$whl" > "$TMP/pip.log" 2>&1 ||
    { cat "$TMP/pip.log"; die "pip could not install $whl"; }
version=$("$ROOT/build/bin/ddprun" --version | head -n 1 | cut -d' ' -f2)
for p in ddprun ddp-train ddprun-store ddprun-store-cli; do
    assert_eq "$("$venv/bin/$p" --version | head -n 1)" "$p $version" "the installed $p's version"
done
assert_eq "$("$venv/bin/python" -m ddprun --version | head -n 1)" "ddprun $version" "python -m ddprun"
assert_eq "$("$venv/bin/python" -c 'import ddprun; print(ddprun.__version__)')" "$version" "ddprun.__version__"
# the carried libraries, not the system's
exe=$("$venv/bin/python" -c 'import ddprun; print(ddprun.bin_path("ddprun"))')
ldd "$exe" | grep -q "libuv.so.1 => $venv/.*/ddprun/bin/../lib/libuv.so.1" ||
    { ldd "$exe"; die "the installed ddprun does not load the wheel's libuv"; }
# and libcurl, which the etcd rendezvous opens (dlopen), the wheel's too
port=$(free_port)
LD_DEBUG=libs timeout 20 "$exe" --nnodes 1 --rdzv-backend etcd-v3 --rdzv-endpoint "127.0.0.1:$port" \
    --rdzv-conf join_timeout=2 --no-python /bin/true > "$TMP/etcd.log" 2>&1
grep -q "calling init: $venv/.*/ddprun/bin/../lib/libcurl.so.4" "$TMP/etcd.log" ||
    { grep -E "libcurl|ddprun:" "$TMP/etcd.log"; die "the installed ddprun does not open the wheel's libcurl"; }
grep -q "no etcd member answered" "$TMP/etcd.log" || { cat "$TMP/etcd.log"; die "no etcd error"; }

# a torch script with ddprun.snapshot through the console script: killed, resumed, the same weights
cd "$TMP" || die "no $TMP"
unset PYTHON_EXEC # (the console script's default: its own Python)
"$venv/bin/ddprun" --standalone --nproc-per-node 2 "$WORKERS/snapshot_lib.py" > "$TMP/clean.log" 2>&1 ||
    { cat "$TMP/clean.log"; die "the uninterrupted run failed"; }
"$venv/bin/ddprun" --standalone --nproc-per-node 2 --max-restarts 1 "$WORKERS/snapshot_lib.py" \
    --kill-at 17 > "$TMP/killed.log" 2>&1 || { cat "$TMP/killed.log"; die "the killed run did not recover"; }
grep -q "python $venv/bin/python" "$TMP/killed.log" || { cat "$TMP/killed.log"; die "the workers did not run under the venv's Python"; }
grep -q "restart 1 of 1" "$TMP/killed.log" || { cat "$TMP/killed.log"; die "the group was not restarted"; }
grep -q "^resuming after step 16$" "$TMP/killed.log" || { cat "$TMP/killed.log"; die "not resumed after step 16"; }
want=$(grep -o "final weights .*" "$TMP/clean.log")
[ -n "$want" ] || { cat "$TMP/clean.log"; die "the uninterrupted run printed no weights"; }
assert_eq "$(grep -o "final weights .*" "$TMP/killed.log")" "$want" "the resumed run's weights against the uninterrupted run's"

# outside ddprun: the directory on disk it is given, atomically replaced
DDPRUN_SNAPSHOT_DIR= "$venv/bin/python" - "$TMP/disk" << 'PYEOF' || die "ddprun.snapshot outside ddprun"
import os, sys
from ddprun import snapshot
d = sys.argv[1]
assert snapshot.load(fallback=d) == (None, -1)
assert snapshot.save({"w": [1, 2]}, 4, fallback=d) == os.path.join(d, snapshot.FILE)
snapshot.save({"w": [3]}, 5, fallback=d)
assert snapshot.load(fallback=d) == ({"w": [3]}, 5), snapshot.load(fallback=d)
assert os.listdir(d) == [snapshot.FILE], os.listdir(d)  # no temporary left
assert snapshot.save({"w": 0}, 1) is None  # nowhere to keep it: nothing written
PYEOF
echo "ok: $(basename "$whl") installed; killed in step 17, resumed after 16, $want as never killed"
