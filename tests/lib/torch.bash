# The PyTorch that the compatibility tests (tests/compat) run against, in
# one place. TORCH_PY names its Python: Debian's python3 with python3-torch
# (torch 1.13) unless the caller sets it; tests/run's second pass and
# `make check-torch2` set it to build/torch2-venv/bin/python (torch 2.x,
# made by scripts/torch2-venv). Sourced by the scenarios after
# lib/store.bash or lib/agent.bash (it uses their skip), never run on its own.

TORCH_PY=${TORCH_PY:-/usr/bin/python3}

# What to do about a TORCH_PY without torch, for skip messages.
torch_hint() {
    case $TORCH_PY in
        /usr/bin/python3) echo "apt install python3-torch" ;;
        */torch2-venv/bin/python) echo "run scripts/torch2-venv" ;;
        *) echo "point TORCH_PY at a Python with torch" ;;
    esac
}

# need_torch [MODULE...]: skips the scenario (exit 77, naming what is
# missing) unless TORCH_PY imports torch.distributed and every MODULE; sets
# TORCH_VERSION (e.g. 1.13.0a0, 2.15.0+cu132) and TORCH_MAJOR (1, 2).
need_torch() {
    local m mods=torch.distributed
    for m in "$@"; do mods="$mods, $m"; done
    [ -x "$TORCH_PY" ] || skip "no $TORCH_PY ($(torch_hint))"
    "$TORCH_PY" -c "import $mods" 2> /dev/null ||
        skip "$mods not importable by $TORCH_PY ($(torch_hint))"
    TORCH_VERSION=$("$TORCH_PY" -c 'import torch; print(torch.__version__)' 2> /dev/null)
    # shellcheck disable=SC2034 # for the scripts that source this file
    TORCH_MAJOR=${TORCH_VERSION%%.*}
    echo "torch $TORCH_VERSION ($TORCH_PY)"
}
