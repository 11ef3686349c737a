"""The environment variables mixshard reads are the ones the design names, and the Makefile
hands its commands none: a make target says its own way on instead."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"\bMIXSHARD_[A-Z_]+\b")


def test_the_design_names_every_variable_mixshard_reads():
    read = set()
    for path in (ROOT / "mixshard").rglob("*.py"):
        read |= set(NAME.findall(path.read_text(encoding="utf-8")))
    assert read == {"MIXSHARD_DATA", "MIXSHARD_MMAP", "MIXSHARD_STAGING"}
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    assert "one of the three environment variables mixshard reads" in design
    assert set(NAME.findall(design)) == read


def test_the_makefile_sets_no_mixshard_variable_for_its_commands():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert set(NAME.findall(makefile)) == {"MIXSHARD_DATA"}  # in the line it prints
    assert "Use it: export MIXSHARD_DATA=" in makefile
