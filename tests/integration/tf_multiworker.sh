#!/usr/bin/env bash
# TensorFlow's MultiWorkerMirroredStrategy under ddprun --tf-config, with
# real TensorFlow (build/tf-venv: scripts/tf-venv, `make check-tf`; skipped,
# saying so, without it): a Keras model.fit of a small network, each worker
# reading TF_CONFIG as ddprun wrote it, on one agent with 2 workers and on
# two agents (c10d) with 1 worker each. Every worker trains in the same
# cluster of 2 (num_replicas_in_sync) and ends with the same loss (the
# gradients are all-reduced), and every layout gives the same loss; also on
# two test hosts (network namespaces, tests/lib/netbed.bash). Then a
# worker SIGKILLed in the middle of fit: the group restarts with a fresh
# TF_CONFIG and Keras' BackupAndRestore resumes the fit from the last
# finished epoch, not from the first.
# timeout: 300
# shellcheck source=tests/lib/agent.bash disable=SC2154 # PID_<name> come from start_ddprun
source "$(dirname "$0")/../lib/agent.bash"
TFPY=$ROOT/build/tf-venv/bin/python
[ -x "$TFPY" ] || skip "skipped: no TensorFlow (build/tf-venv: make check-tf makes it)"
cat > "$TMP/fit.py" << 'PY'
import os
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["TF_USE_LEGACY_KERAS"] = "1"  # Keras 2: Keras 3 has no MultiWorkerMirroredStrategy
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
tf.keras.utils.set_random_seed(1)
x = np.random.RandomState(0).randn(512, 8).astype("float32")
y = (x.sum(axis=1) > 0).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
with strategy.scope():
    m = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="relu"),
                             tf.keras.layers.Dense(1)])
    m.compile(optimizer=tf.keras.optimizers.SGD(0.1),
              loss=tf.keras.losses.BinaryCrossentropy(from_logits=True))
h = m.fit(ds, epochs=3, verbose=0)
print(f"rank={os.environ['RANK']} replicas={strategy.num_replicas_in_sync} "
      f"loss={h.history['loss'][-1]:.6f}", flush=True)
PY
export PYTHON_EXEC=$TFPY
# losses NAME: the workers' result lines of a job, checked: 2 replicas each,
# one loss for all; prints it.
losses() {
    local lines
    lines=$(cat "$TMP/$1".*out 2> /dev/null | sed -n 's/.*\(rank=[0-9]* replicas=[0-9]* loss=[0-9.]*\).*/\1/p' | sort)
    [ "$(grep -c "replicas=2 " <<< "$lines")" = 2 ] || { dump "$1"; die "$1: not 2 workers in a cluster of 2: $lines"; }
    [ "$(sed 's/.*loss=//' <<< "$lines" | sort -u | wc -l)" = 1 ] || die "$1: the workers' losses differ: $lines"
    sed -n '1s/.*loss=//p' <<< "$lines"
}
start_ddprun one --standalone --nproc-per-node 2 --tf-config "$TMP/fit.py"
wait_exit 180 "$PID_one"
assert_rc one 0
l1=$(losses one)
port=$(free_port)
for n in a b; do
    start_ddprun "$n" --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d \
        --rdzv-endpoint 127.0.0.1:"$port" --rdzv-id tf --tf-config "$TMP/fit.py"
    [ "$n" = a ] && wait_for 30 "a's store on port $port" store_up "$port"
done
wait_all_rc 180 0 a b
cat "$TMP"/a.out "$TMP"/b.out > "$TMP/two.out"
l2=$(losses two)
[ "$l1" = "$l2" ] || die "one node's loss $l1, two nodes' $l2"

# A worker killed mid-fit; BackupAndRestore resumes.
cat > "$TMP/resume.py" << 'PY'
import os, signal, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
x = np.random.RandomState(0).randn(512, 8).astype("float32")
y = (x.sum(axis=1) > 0).astype("float32")
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)

class Trace(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        print(f"rank={os.environ['RANK']} restart={restart} epoch={epoch}", flush=True)
        if restart == 0 and epoch == 3 and os.environ["RANK"] == "1":
            os.kill(os.getpid(), signal.SIGKILL)

with strategy.scope():
    m = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16, activation="relu"),
                             tf.keras.layers.Dense(1)])
    m.compile(optimizer=tf.keras.optimizers.SGD(0.1),
              loss=tf.keras.losses.BinaryCrossentropy(from_logits=True))
backup = tf.keras.callbacks.BackupAndRestore(backup_dir=sys.argv[1])
m.fit(ds, epochs=6, verbose=0, callbacks=[backup, Trace()])
print(f"rank={os.environ['RANK']} restart={restart} done", flush=True)
PY
start_ddprun kill --standalone --nproc-per-node 2 --max-restarts 1 --tf-config "$TMP/resume.py" "$TMP/backup"
wait_exit 180 "$PID_kill"
assert_rc kill 0
assert_grep "$TMP/kill.err" "local rank 1 \(rank 1, pid [0-9]+\) failed: Signal 9 \(SIGKILL\)" "the killed worker"
first=$(sed -n 's/.*rank=0 restart=1 epoch=\([0-9]*\).*/\1/p' "$TMP/kill.out" | head -n 1)
[ -n "$first" ] && [ "$first" -ge 2 ] || { dump kill; die "after the restart the fit began at epoch '${first}', not where it stopped"; }
[ "$(grep -c "restart=1 done" "$TMP/kill.out")" = 2 ] || { dump kill; die "the restarted workers did not finish"; }

# Two test hosts (network namespaces): the cluster list names h1 and h2.
source "$ROOT/tests/lib/netbed.bash"
netbed_up 2
port=$(free_port)
for h in 1 2; do
    netbed_exec "$h" env DDPRUN_TEST_TAG="$TAG" PYTHON_EXEC="$TFPY" ddprun --nnodes 2 --nproc-per-node 1 \
        --rdzv-backend c10d --rdzv-endpoint "$(netbed_addr 1):$port" --rdzv-id tfbed --tf-config \
        "$TMP/fit.py" > "$TMP/bed.h$h.out" 2> "$TMP/bed.h$h.err" &
    PIDS+=($!)
    printf -v "PID_bed_h$h" %s "$!"
done
for h in 1 2; do
    pid=PID_bed_h$h
    wait_exit 180 "${!pid}"
    [ "$RC" = 0 ] || { dump bed.h1 bed.h2; die "host $h's ddprun exited $RC"; }
done
l3=$(losses bed)
[ "$l3" = "$l1" ] || die "the test hosts' loss $l3, one node's $l1"
grep -q "started 1 worker on h2: node rank [01] of 2" "$TMP/bed.h2.err" || { dump bed.h1 bed.h2; die "host 2 did not take part"; }
echo "ok: MultiWorkerMirroredStrategy from ddprun's TF_CONFIG: 2 workers on one node, on two, on two test hosts, loss $l1 each time; killed at epoch 3, resumed at epoch $first"
