#!/usr/bin/env bash
# The bootstrap bench's small version (make bench-bootstrap at 2,000 ranks):
# simulated ranks doing what torch 2.x's init_process_group sends to the
# store (bench/bootstrap_sim.c) through 20 per-node proxies of 100 ranks,
# for each unique-id exchange: torch 2.15's default (WAIT, WAIT, MULTI_GET),
# the older one (WAIT, GET), several roots (TORCH_NCCL_RANKS_PER_ROOT: every
# rank WAITs for and MULTI_GETs 16 ids, which each proxy sends to the store
# for its ranks together), and the store-based barrier. Every rank must
# finish; how fast is the bench's to say.
# timeout: 120
set -u
# shellcheck source=tests/lib/store.bash
. "$(dirname "$0")/../lib/store.bash"
SIM=$ROOT/build/tests/bootstrap-sim
[ -x "$SIM" ] || die "$SIM is not built (run make)"

start_store store 127.0.0.1
store_port=$STORE_PORT
eps=()
for i in $(seq 0 19); do
    start_store "proxy$i" 127.0.0.1 --proxy-to "127.0.0.1:$store_port"
    eps+=("127.0.0.1:$STORE_PORT")
done
endpoints=$(IFS=,; echo "${eps[*]}")
run=0
for how in "" "--nccl legacy" "--ranks-per-root 128" "--barrier"; do
    run=$((run + 1))
    what=${how:-"the default exchange"}
    # shellcheck disable=SC2086 # $how is options
    line=$("$SIM" --ranks 2000 --nodes 20 --endpoints "$endpoints" --timeout 60 \
        --prefix "run$run" $how 2> "$TMP/sim$run.err") ||
        { cat "$TMP/sim$run.err"; echo "$line"; die "2,000 ranks, $what"; }
    case " $line " in
    *" failed 0 "* | *" failed=0 "*) ;;
    *) echo "$line"; die "not every rank finished, $what" ;;
    esac
    echo "2,000 ranks through 20 proxies, $what: $line"
done
