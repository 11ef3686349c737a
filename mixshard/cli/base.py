"""The `mixshard` command group and what its commands share: one `Error: ...` line for a
`MixshardError` (exit 1), the arguments a library message names spelled as the command's own
flags, the `--quiet` option, the PACK argument, byte and path display."""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Callable
from typing import Any

import click

from ..core.errors import RESUME, Arg, MixshardError


def human_bytes(n: float) -> str:
    """`21234567` -> `"21.2 MB"` (decimal units)."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def as_flag(arg: Arg, command: click.Command | None = None) -> str:
    """An argument a library message names, spelled as the flag of `command`'s parameter of
    that name (default: the running command's): its first long option, and the value quoted
    for the shell (`within='a b'` -> `--within 'a b'`, `workers=1` -> `--workers 1`); a flag
    given True, or an argument without a value, as the option alone (`--resume`, `--ray`).
    A name the command has no option for keeps Python's spelling (a test checks that `pack`
    has one for each the library names)."""
    if command is None:
        ctx = click.get_current_context(silent=True)
        command = ctx.command if ctx is not None else None
    params = {p.name: p for p in command.params} if command is not None else {}
    param = params.get(arg.name)
    if not isinstance(param, click.Option):
        return str(arg)
    if param.is_flag and arg.value is False:  # `--no-x`; a flag without one: never `--x`
        return _long(param.secondary_opts) if param.secondary_opts else str(arg)
    flag = _long(param.opts)
    if arg.value is ... or param.is_flag:
        return flag
    return f"{flag} {shlex.quote(str(arg.value))}"


def _long(opts: list[str]) -> str:
    return next((o for o in opts if o.startswith("--")), opts[0])


def resume_hint(command: click.Command | None = None) -> str:
    return f"rerun the same command with {as_flag(RESUME, command)} to continue"


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
            command = self.get_command(ctx, ctx.invoked_subcommand or "")
            message = exc.worded(lambda arg: as_flag(arg, command))
            if exc.resumable and all(a.name != RESUME.name for a in exc.arguments):
                message = f"{message}; {resume_hint(command)}"
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
