#!/usr/bin/env bash
# --version on every program: "NAME VERSION" (scripts/version's: the
# VERSION file, and the commit in a checkout) and the build's libraries
# ("CUDA x, cuDNN y, NCCL z, oneDNN w", or "cpu only (no CUDA), oneDNN w"),
# exit 0, nothing run; a prefix of it (ddprun takes abbreviations) too;
# and --help lists it.
# timeout: 30
# shellcheck source=tests/lib/agent.bash
source "$(dirname "$0")/../lib/agent.bash"

# (".dirty" aside: files edited since the build leave it the same commit's)
want=$("$ROOT/scripts/version")
want=${want%.dirty}
for p in ddprun ddprun-store ddprun-store-cli ddp-train ddp-allreduce-bench ddprun-exec; do
    out=$("$p" --version 2>&1)
    rc=$?
    assert_eq "$rc" 0 "$p --version's exit status"
    assert_eq "$(echo "$out" | head -n 1 | sed 's/\.dirty$//')" "$p $want" "$p --version's first line"
    echo "$out" | sed -n 2p | grep -Eq '^build: (CUDA [0-9.]+, cuDNN [0-9.]+, NCCL [0-9.]+|cpu only \(no CUDA\)), oneDNN [0-9]+\.[0-9]+\.[0-9]+$' ||
        die "$p --version's second line: '$(echo "$out" | sed -n 2p)'"
    [ "$(echo "$out" | wc -l)" = 2 ] || die "$p --version printed more than two lines: $out"
done
for p in ddprun ddprun-store ddprun-store-cli ddp-train ddp-allreduce-bench; do
    "$p" --help 2>&1 | grep -q -- "--version" || die "$p --help does not list --version"
done
# a prefix, and --version after other options: nothing runs, the version is said
assert_eq "$(ddprun --nproc-per-node 2 --vers true 2>&1 | head -n 1 | sed 's/\.dirty$//')" "ddprun $want" \
    "ddprun --vers after an option"
# the version a build says follows the checkout: a commit is in it
if [ -e "$ROOT/.git" ]; then
    echo "$want" | grep -Eq "^$(sed 's/[.+]/\\&/g' "$ROOT/VERSION")\+git\.[0-9a-f]{7}(\.dirty)?$" ||
        die "scripts/version says '$want', not VERSION+git.COMMIT"
fi
echo "ok: every program says '$want'"
