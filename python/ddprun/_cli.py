"""The console scripts: each runs the program of its name, in this process
(exec), with the arguments it was given. ddprun's workers run under the
Python of this environment unless PYTHON_EXEC says otherwise, as torchrun's
run under the Python that started torchrun."""
import os
import sys

from ddprun import bin_path


def _run(program):
    path = bin_path(program)
    if not os.access(path, os.X_OK):
        sys.exit(f"{program}: the ddprun package has no runnable {path}")
    os.environ.setdefault("PYTHON_EXEC", sys.executable)
    os.execv(path, [program] + sys.argv[1:])


def ddprun():
    _run("ddprun")


def ddp_train():
    _run("ddp-train")


def ddprun_store():
    _run("ddprun-store")


def ddprun_store_cli():
    _run("ddprun-store-cli")
