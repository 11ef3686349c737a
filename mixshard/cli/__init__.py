"""The `mixshard` command line: the group (`base`), `pack` (`write_cmds`) and the read-only
commands (`read_cmds`). Library code never prints; these modules do."""

from __future__ import annotations

import atexit
import os
import sys
from typing import Any

import click

from . import read_cmds, write_cmds  # noqa: F401 - registers the commands
from .base import cli

__all__ = ["cli", "main"]


def main() -> None:
    """Console-script entry point."""
    _one_blas_thread()
    from ..writing.run import ctrlc

    # Ctrl-C counted to the process's very end: one the command dropped, or one that lands in
    # an `atexit` callback (a process pool's, where Python drops it), still exits 130
    seen = ctrlc.CtrlC().__enter__()
    told: list[int] = []
    atexit.register(_interrupted_at_exit, told)  # registered first: called last
    code: Any = 0
    try:
        cli(prog_name="mixshard")
    except SystemExit as exc:
        code = exc.code
    ctrlc.count_only()
    told.append(ctrlc.count())
    if seen.seen and not code:  # came while the command ran, and it did not say so
        click.echo("Interrupted as mixshard finished; what it printed above is complete.", err=True)
        code = 130
    sys.exit(code)


def _interrupted_at_exit(told: list[int]) -> None:
    from ..writing.run import ctrlc

    if told and ctrlc.count() > told[0]:
        sys.stdout.flush()
        sys.stderr.write("Interrupted as mixshard exited; what it printed above is complete.\n")
        sys.stderr.flush()
        os._exit(130)  # noqa: SLF001 - the exit status is all that is left to give


def _one_blas_thread() -> None:
    """numpy's OpenBLAS starts a thread per core when numpy is imported, and each spins for a
    while before it sleeps (about 0.1 CPU second per thread: 6 s on 64 cores, before `pack`
    has decoded anything). The only BLAS work is pack's resize, products of ~12x18 by 18x288
    that one thread runs best, so, unless the user set it, one thread."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
