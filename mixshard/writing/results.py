"""What `pack` reports: its progress while it runs, and what it made."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.manifest import Manifest


@dataclass(frozen=True)
class PackProgress:
    """Progress of a running pack: `done` of `total` images written (a source image counts
    once per variant), and how many source files were skipped.

    While a clip pack's probe of a video has run over a second (before the plan exists: then
    `total`, `done` and `skipped` are 0), `probing` names the video and `probed` counts the
    bytes read of it."""

    total: int
    done: int
    skipped: int
    uploaded: int | None = None  # into an object store: images in shards uploaded so far
    probing: str | None = None
    probed: int = 0


@dataclass(frozen=True)
class PackResult:
    """What `pack` made. For a job-array part, `manifest` is None until the finish run."""

    manifest: Manifest | None
    out: Path | str  # a str: the URL of an object store prefix
    seconds: float
    reused_shards: int
    already_complete: bool = False
    written_shards: int = 0
    rewritten_shards: int = 0  # finished before, rewritten: a source file of theirs changed
