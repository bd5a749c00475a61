#!/usr/bin/env bash
# make deb: the package's fields (its version is the build's, its Depends
# what dpkg-shlibdeps found, libc6 among them), its files (the programs,
# their compressed man pages, the docs); every dependency it declares is a
# package installed on this machine at a version it accepts; unpacked into
# a scratch root (dpkg -x), its ddprun says the version and runs a
# two-worker job; lintian finds no error where lintian is installed.
# timeout: 180
# shellcheck source=tests/lib/agent.bash
source "$(dirname "$0")/../lib/agent.bash"
command -v dpkg-deb > /dev/null && command -v dpkg-shlibdeps > /dev/null ||
    skip "skipped: dpkg-deb or dpkg-shlibdeps (dpkg-dev) is missing"

make -s -C "$ROOT" deb > "$TMP/make.out" 2> "$TMP/make.err" || { cat "$TMP/make.err"; die "make deb failed"; }
deb=$(tail -n 1 "$TMP/make.out")
deb=$ROOT/$deb
[ -s "$deb" ] || die "make deb made no package ($deb)"
field() { dpkg-deb -f "$deb" "$1"; }
assert_eq "$(field Package)" ddprun "the package's name"
assert_eq "$(field Version)" "$("$ROOT/scripts/version")" "the package's version"
assert_eq "$(field Architecture)" "$(dpkg --print-architecture)" "the package's architecture"
depends=$(field Depends)
echo "Depends: $depends"
echo "$depends" | grep -q "libc6 (>= " || die "Depends lacks libc6: $depends"
# libcurl is loaded only for etcd (dlopen): recommended, and not a Depends
field Recommends | grep -q "^libcurl4 (>= " || die "Recommends lacks libcurl4: $(field Recommends)"
echo "$depends" | grep -qv "libcurl" || die "libcurl became a Depends again: $depends"
dpkg-deb -c "$deb" > "$TMP/contents"
for f in usr/bin/ddprun usr/bin/ddprun-exec usr/bin/ddp-train usr/share/man/man1/ddprun.1.gz \
    usr/share/doc/ddprun/cli.md; do
    grep -q " \./$f$" "$TMP/contents" || die "the package lacks $f"
done
grep -q " root/root .*\./usr/bin/ddprun$" "$TMP/contents" || die "the files are not root's in the package"

# every dependency is met on this machine (one of each "a | b" alternative)
echo "$depends" | tr ',' '\n' | sed 's/^ *//' | while read -r alt; do
    met=0
    while read -r dep; do
        pkg=${dep%% *}
        have=$(dpkg-query -W -f='${Status} ${Version}' "$pkg" 2> /dev/null) || continue
        case $have in "install ok installed "*) ;; *) continue ;; esac
        v=${have##* }
        if [[ $dep =~ \((.*)\ (.*)\) ]]; then
            op=${BASH_REMATCH[1]} want=${BASH_REMATCH[2]}
            case $op in ">=") op=ge ;; ">>") op=gt ;; "<=") op=le ;; "<<") op=lt ;; "=") op=eq ;; esac
            dpkg --compare-versions "$v" "$op" "$want" || continue
        fi
        met=1
    done < <(echo "$alt" | tr '|' '\n' | sed 's/^ *//; s/ *$//')
    [ $met = 1 ] || { echo "FAIL: the dependency '$alt' is not met here" >&2; exit 1; }
done || die "a declared dependency is not installed"

root=$TMP/root
dpkg -x "$deb" "$root"
assert_eq "$("$root/usr/bin/ddprun" --version | head -n 1)" "ddprun $(field Version)" "the packaged ddprun's version"
PATH=/usr/bin:/bin "$root/usr/bin/ddprun" --standalone --nproc-per-node 2 --no-python \
    "$root/usr/bin/ddp-train" --device cpu --model resnet20 --data synthetic --batch-size 4 \
    --max-steps 3 --no-eval --threads 1 > "$TMP/job.log" 2>&1 || { cat "$TMP/job.log"; die "the packaged ddprun's job failed"; }
grep -q "^done: 3 steps" "$TMP/job.log" || { cat "$TMP/job.log"; die "the job did not train its 3 steps"; }
if command -v lintian > /dev/null; then
    lintian --fail-on error "$deb" || die "lintian found errors"
else
    echo "lintian: not installed here (that part skipped)"
fi
echo "ok: $(basename "$deb"), Depends: $depends"
