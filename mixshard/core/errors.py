"""The error hierarchy, and the one convention every module follows.

* A caller's bad *argument* (a wrong type, a value out of range, two options that exclude
  each other) raises `ValueError` or `TypeError`, at the call, before any work is done.
* Bad *data or environment* (a missing or damaged source, pack, shard or server, a full disk,
  a folder in use) raises a `MixshardError` subclass. Its message names the file or URL, says
  what was found and what is expected, and gives the fix.
* Library messages name function arguments as data, never command-line flags: a message is
  text and `Arg`s, which `str()` spells as Python does (`resume=True`) and the CLI as its own
  flags (`--resume`), so no caller rewrites a message. The CLI prints an `ArgumentError` as a
  usage error (exit 2), a `MixshardError` as one `Error: ...` line (exit 1).
* `assert` is never used on input. Library code never prints; warnings use `warnings.warn`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any


@dataclass(frozen=True)
class Arg:
    """An argument a message names: its `name`, and `value`, the value to pass (`...`: the
    argument itself, no value). `str()` spells it as Python does: `resume=True`,
    `within='a b'`, `every`."""

    name: str
    value: Any = ...

    def __str__(self) -> str:
        return self.name if self.value is ... else f"{self.name}={self.value!r}"


RESUME = Arg("resume", True)
OVERWRITE = Arg("overwrite", True)


class Naming:
    """An exception whose message (its `args`) is text and `Arg`s, joined by `str()`."""

    args: tuple[Any, ...]

    def __str__(self) -> str:
        return self.worded(str)

    def worded(self, spell: Callable[[Arg], str]) -> str:
        """The message with each `Arg` spelled `spell(arg)` (the CLI's: as its flag)."""
        return "".join(spell(p) if isinstance(p, Arg) else str(p) for p in self.args)

    @property
    def arguments(self) -> tuple[Arg, ...]:
        """The arguments the message names, in its order."""
        return tuple(p for p in self.args if isinstance(p, Arg))


class MixshardError(Naming, Exception):
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

    def __init__(self, *message: str | Arg, skipped: list[dict[str, str]]) -> None:
        super().__init__(*message)
        self.skipped = skipped

    def __reduce__(self) -> tuple[Any, ...]:  # a worker's or Ray task's error, with `skipped`
        return partial(type(self), skipped=self.skipped), self.args


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


class ArgumentError(Naming, ValueError):
    """Arguments a call cannot be made with: a message of text and `Arg`s, worded once for
    Python (`crop='full'`) and the command line (`--crop full`)."""
