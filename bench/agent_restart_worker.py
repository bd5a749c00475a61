import time; T0 = time.time()  # noqa: E401,E702 -- first: when the interpreter got here
"""The worker of bench/agent_bench.sh's restart measurement, the same under
ddprun and torchrun. Attempt 0 (TORCHELASTIC_RESTART_COUNT=0): rank 1 waits
BENCH_FAIL_AFTER seconds, writes the time to $BENCH_OUT/fail and exits 1;
the others wait to be stopped. Attempt 1: every rank writes the time its
interpreter reached the first line to $BENCH_OUT/start.<rank> and exits 0.
The restart latency is max(start.*) - fail."""
import os
import sys

out = os.environ["BENCH_OUT"]
rank = os.environ["RANK"]
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
    if rank == "1":
        time.sleep(float(os.environ.get("BENCH_FAIL_AFTER", "1")))
        with open(os.path.join(out, "fail"), "w") as f:
            f.write(repr(time.time()))
        os._exit(1)
    time.sleep(300)
    sys.exit(0)
with open(os.path.join(out, "start.%s" % rank), "w") as f:
    f.write(repr(T0))
