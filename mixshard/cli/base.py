"""The `mixshard` command group and what its commands share: one `Error: ...` line for a
`MixshardError` (exit 1), the `--quiet` option, the PACK argument, byte and path display."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Callable
from typing import Any

import click

from ..core.errors import MixshardError

RESUME_HINT = "rerun the same command with --resume to continue"


def human_bytes(n: float) -> str:
    """`21234567` -> `"21.2 MB"` (decimal units)."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


# How library messages name arguments, and the flags that set them here.
_FLAGS = (
    ("pack again with resume=True", "rerun the same command with --resume"),
    ("pass strict=False", "drop --strict"),
    ("strict:", "--strict:"),
    ("resume=True", "--resume"),
    ("overwrite=True", "--overwrite"),
    ("workers=1", "--workers 1"),
    ("labels='folders'", "--labels folders"),
    ("labels='none'", "--labels none"),
    ("labels='auto'", "--labels auto"),
    ("ray=...", "--ray"),
)


_WITHIN = re.compile(r"within=(?:'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\")")


def as_flags(message: str) -> str:
    """A library message with argument names replaced by this command's flags (`within='a b'`
    becomes `--within 'a b'`, quoted for the shell where it needs it)."""
    for argument, flag in _FLAGS:
        message = message.replace(argument, flag)
    return _WITHIN.sub(lambda m: "--within " + shlex.quote(m.group(1) or m.group(2) or ""), message)


def _repack_hint(message: str) -> str:
    """Where a wrapper runs the command (the Makefile's dataset targets set
    `MIXSHARD_REPACK_HINT` to their own command with `REPACK=1`), its way to replace a pack
    stands in for `--overwrite`, which the user cannot pass there as is."""
    hint = os.environ.get("MIXSHARD_REPACK_HINT")
    if not hint:
        return message
    return message.replace("pass --overwrite", f"rerun with `{hint}`")


# What a name from the data must not print as is: control characters (a newline would start a
# line of its own, as if mixshard had printed it; ESC drives the terminal), line and paragraph
# separators, and the bidirectional overrides that show text in another order than it has.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(text: str) -> str:
    """Text for the terminal, one line: the bytes of a file name that are not UTF-8 (surrogate
    escapes, as `os.listdir` gives them) appear as `\\xNN`, control characters as `\\xNN`
    (a newline as `\\x0a`), line separators and bidirectional overrides as `\\uNNNN`."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raw = text.encode("utf-8", "backslashreplace")
    return _UNSAFE.sub(_escape, raw.decode("utf-8", "backslashreplace"))


def shown_json(data: Any) -> str:
    """`data` as indented JSON for the terminal: JSON escapes C0 in strings itself; what else
    `shown` escapes in a name is written as a JSON escape (`\\u2028`), so the text stays valid
    JSON and each line one line."""
    text = json.dumps(data, indent=2, ensure_ascii=False)
    text = _UNSAFE.sub(lambda m: m.group() if m.group() == "\n" else _json_escape(m), text)
    return "\n".join(shown(line) for line in text.split("\n"))


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


class _Group(click.Group):
    """Turns library errors into one clean line instead of a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except MixshardError as exc:
            message = _repack_hint(as_flags(str(exc)))
            if exc.resumable and "--resume" not in message:
                message = f"{message}; {RESUME_HINT}"
            raise click.ClickException(shown(message)) from None
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            sys.exit(130)


def quiet_option(f: Callable) -> Callable:
    return click.option("--quiet", "-q", is_flag=True, help="No progress bar.")(f)


def _known_location(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from ..core.stores import check_location

    check_location(value)  # an unknown xyz:// is an error, never a folder name
    return value


def pack_argument(f: Callable) -> Callable:
    return click.argument("pack", type=click.Path(path_type=str), callback=_known_location)(f)


class PartType(click.ParamType):
    """`K/N`: part K of N of a job array (0 <= K < N)."""

    name = "K/N"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[int, int]:
        if isinstance(value, tuple):
            return value
        try:
            k, n = (int(v) for v in str(value).split("/"))
        except ValueError:
            self.fail(f"{value!r} is not K/N (e.g. 3/16)", param, ctx)
        if n < 1 or not 0 <= k < n:
            self.fail(f"{value}: need 0 <= K < N and N >= 1", param, ctx)
        return k, n


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mixshard", prog_name="mixshard")
def cli() -> None:
    """Pack image folders into pre-resized uint8 shards and blend them into RL observations.

    \b
    Examples:
      mixshard pack places365_standard/train data/places365_standard
      mixshard pack val2017 data/coco --workers 8
      mixshard verify data/coco
      mixshard inspect data/coco --json
      mixshard preview data/coco -o coco.png
    """
