"""The error hierarchy. Every message says what was found, what is accepted, and the fix."""

from __future__ import annotations


class MixshardError(Exception):
    """Base class of every error mixshard raises on bad input; the CLI prints it as one line."""


class SourceError(MixshardError):
    """The image source (SRC) is missing, empty or ambiguous."""


class OutputError(MixshardError):
    """The output folder cannot be used or written."""


class ManifestError(MixshardError):
    """`index.json` is missing, unreadable, or of another format or version."""


class ShardError(MixshardError):
    """A shard is missing, truncated, altered or unreachable."""


class SkippedImagesError(MixshardError):
    """`--strict` was given and some images could not be read."""

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
