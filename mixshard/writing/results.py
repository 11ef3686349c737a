"""What `pack` reports: its progress while it runs, and what it made."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..core.manifest import Manifest


@dataclass(frozen=True)
class PackProgress:
    """Progress of a running pack: `done` of `total` images written (a source image counts
    once per variant), and how many source files were skipped."""

    total: int
    done: int
    skipped: int
    uploaded: int | None = None  # into an object store: images in shards uploaded so far


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
