#!/usr/bin/env bash
# make install and make uninstall, into a scratch root (DESTDIR) under
# PREFIX=/usr: every program in bin/, a man page for each (made from its
# --help, readable by man), the docs in share/doc/ddprun; the installed
# ddprun says the build's version and runs a two-worker ddp-train job
# (starting its workers through the installed ddprun-exec beside it);
# uninstall leaves no file behind. PREFIX's default is /usr/local.
# timeout: 120
# shellcheck source=tests/lib/agent.bash
source "$(dirname "$0")/../lib/agent.bash"

root=$TMP/root
progs=(ddprun ddprun-exec ddprun-store ddprun-store-cli ddp-train ddp-allreduce-bench)
make -s -C "$ROOT" install DESTDIR="$root" PREFIX=/usr > "$TMP/install.log" 2>&1 ||
    { cat "$TMP/install.log"; die "make install failed"; }
for p in "${progs[@]}"; do
    [ -x "$root/usr/bin/$p" ] || die "no usr/bin/$p"
    assert_eq "$("$root/usr/bin/$p" --version | head -n 1)" "$("$ROOT/build/bin/$p" --version | head -n 1)" \
        "the installed $p's version"
    page=$root/usr/share/man/man1/$p.1
    [ -s "$page" ] || die "no man page for $p"
    head -n 1 "$page" | grep -q "^\.TH $(echo "$p" | tr '[:lower:]' '[:upper:]') 1 " || die "$p.1 has no .TH line"
    if command -v man > /dev/null; then
        MANWIDTH=100 man -l "$page" 2> /dev/null | grep -A1 '^NAME' | grep -Eq "$p +- " ||
            die "man cannot read $p.1"
    fi
done
grep -q -- "--nproc-per-node" "$root/usr/share/man/man1/ddprun.1" || die "ddprun.1 lacks the options"
for d in README.md cli.md architecture.md protocol.md; do
    [ -s "$root/usr/share/doc/ddprun/$d" ] || die "no share/doc/ddprun/$d"
done

# the installed programs run a job (its workers started by the installed ddprun-exec)
PATH=/usr/bin:/bin "$root/usr/bin/ddprun" --standalone --nproc-per-node 2 --no-python \
    "$root/usr/bin/ddp-train" --device cpu --model resnet20 --data synthetic --batch-size 4 \
    --max-steps 3 --no-eval --threads 1 > "$TMP/job.log" 2>&1 || { cat "$TMP/job.log"; die "the installed ddprun's job failed"; }
grep -q "^done: 3 steps" "$TMP/job.log" || { cat "$TMP/job.log"; die "the job did not train its 3 steps"; }

make -s -C "$ROOT" uninstall DESTDIR="$root" PREFIX=/usr > "$TMP/uninstall.log" 2>&1 ||
    { cat "$TMP/uninstall.log"; die "make uninstall failed"; }
left=$(find "$root" -type f)
[ -z "$left" ] || die "make uninstall left: $left"
# PREFIX defaults to /usr/local
make -s -n -C "$ROOT" install DESTDIR="$TMP/other" | grep -q "$TMP/other/usr/local/bin" ||
    die "make install's default PREFIX is not /usr/local"
echo "ok: ${#progs[@]} programs, their man pages and the docs installed into DESTDIR=$root PREFIX=/usr, a job run from there, all uninstalled"
