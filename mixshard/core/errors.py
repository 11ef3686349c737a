"""The error hierarchy, and the one convention every module follows.

* A caller's bad *argument* (a wrong type, a value out of range, two options that exclude
  each other) raises `ValueError` or `TypeError`, at the call, before any work is done.
* Bad *data or environment* (a missing or damaged source, pack, shard or server, a full disk,
  a folder in use) raises a `MixshardError` subclass. Its message names the file or URL, says
  what was found and what is expected, and gives the fix.
* Library messages speak of function arguments (`variants=`), never of command-line flags;
  an `ArgumentError` names them as fields that the CLI spells as its own flags (a usage
  error, exit 2), and the CLI turns a `MixshardError` into one `Error: ...` line (exit 1).
* `assert` is never used on input. Library code never prints; warnings use `warnings.warn`.
"""

from __future__ import annotations

import re
from collections.abc import Callable


class MixshardError(Exception):
    """Base class of every error mixshard raises on bad data or environment; the CLI prints it
    as one line.

    `resumable` is True when an interrupted pack can be finished by running it again with
    `resume=True` (finished shards are kept); the command line then says how.
    """

    resumable = False


class PackInterrupted(MixshardError):
    """A pack stopped part-way (a dead worker, a failed write); finished shards are kept."""

    resumable = True


class SourceError(MixshardError):
    """The image source (SRC) is missing, empty, unreadable or ambiguous."""


class OutputError(MixshardError):
    """The output folder cannot be used or written (in use, read-only, not ours)."""


class WriteError(OutputError, PackInterrupted):
    """A write into the output folder failed part-way (full disk, read-only file system)."""


class ManifestError(MixshardError):
    """`index.json` is missing, unreadable, inconsistent, or of another format or version."""


class ShardError(MixshardError):
    """A shard is missing, truncated, altered, replaced, unreachable or too slow."""


class SkippedImagesError(MixshardError):
    """`strict=True` was given and some images could not be read."""

    def __init__(self, message: str, skipped: list[dict[str, str]]) -> None:
        super().__init__(message)
        self.skipped = skipped


class ImageDecodeError(Exception):
    """One image could not be turned into pixels; `reason` goes into the manifest's `skipped`.

    Internal: pack catches it and records the file; it never reaches the user as an exception.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class ForkedError(MixshardError):
    """An object whose threads run in another process (it was made before a `fork`) was
    used in the child; make it in the child (e.g. in a DataLoader's `worker_init_fn`)."""


class ArgumentError(ValueError):
    """Arguments a call cannot be made with, worded once for every caller. Each argument the
    message names is a field of `template`: `{name}` for the argument, `{name=value}` for it
    set to a value (a Python literal). `str()` spells them as Python does (`every`,
    `crop='full'`); `worded(spell)` as a caller's own (the command line's flags: `--every`,
    `--crop full`), so no caller rewrites the message."""

    def __init__(self, template: str) -> None:
        self.template = template
        super().__init__(
            self.worded(lambda name, value: name if value is None else f"{name}={value}")
        )

    def worded(self, spell: Callable[[str, str | None], str]) -> str:
        """The message with each field spelled `spell(name, value literal or None)`."""
        return _FIELD.sub(lambda m: spell(m.group(1), m.group(2)), self.template)


_FIELD = re.compile(r"\{(\w+)(?:=([^{}]*))?\}")
