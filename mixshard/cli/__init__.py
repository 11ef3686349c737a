"""The `mixshard` command line: the group (`base`), `pack` (`write_cmds`) and the read-only
commands (`read_cmds`). Library code never prints; these modules do."""

from __future__ import annotations

from . import read_cmds, write_cmds  # noqa: F401 - registers the commands
from .base import cli

__all__ = ["cli", "main"]


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="mixshard")
