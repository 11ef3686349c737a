"""The `mixshard` command line: the group (`base`), `pack` (`write_cmds`) and the read-only
commands (`read_cmds`). Library code never prints; these modules do."""

from __future__ import annotations

import os
import sys

from . import read_cmds, write_cmds  # noqa: F401 - registers the commands
from .base import cli

__all__ = ["cli", "main"]


def main() -> None:
    """Console-script entry point."""
    _one_blas_thread()
    cli(prog_name="mixshard")


def _one_blas_thread() -> None:
    """numpy's OpenBLAS starts a thread per core when numpy is imported, and each spins for a
    while before it sleeps (about 0.1 CPU second per thread: 6 s on 64 cores, before `pack`
    has decoded anything). The only BLAS work is pack's resize, products of ~12x18 by 18x288
    that one thread runs best, so, unless the user set it, one thread."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
