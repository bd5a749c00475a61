"""ddprun: torchrun's elastic launcher, and a data-parallel trainer, in C.

This package carries ddprun's compiled programs (``bin/``, with the shared
libraries they need in ``lib/``) and puts them on the path: ``ddprun``,
``ddp-train``, ``ddprun-store`` and ``ddprun-store-cli`` as console scripts,
and ``python -m ddprun`` as ``ddprun``. ``ddprun.snapshot`` keeps a PyTorch
script's state in the memory ddprun gives each node, so that a restarted
group resumes from the last step.
"""
import os

__all__ = ["bin_path", "__version__"]

_HERE = os.path.dirname(os.path.abspath(__file__))


def bin_path(program="ddprun"):
    """The path of one of the programs this package carries."""
    return os.path.join(_HERE, "bin", program)


def _read_version():
    try:
        with open(os.path.join(_HERE, "VERSION")) as f:
            return f.read().strip()
    except OSError:
        return "unknown"


__version__ = _read_version()
