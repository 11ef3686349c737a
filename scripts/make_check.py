"""The checks the Makefile's dataset targets run before packing: SRC and DATA as make got them.

    python scripts/make_check.py TARGET SRC DATA PACK_NAME...

Refuses (exit 1, one message) a literal `~` (make runs recipes with sh, which does not expand
`SRC=~/...`), a DATA that is SRC or inside it (the packs would be written into the download),
and a pack folder DATA/PACK_NAME that is SRC or holds it.
"""

from __future__ import annotations

import sys
from pathlib import Path


def problem(target: str, src: str, data: str, names: list[str]) -> str | None:
    for var, value in (("SRC", src), ("DATA", data)):
        if value.startswith("~"):
            fixed = "$HOME" + value[1:] if value.startswith("~/") else "$HOME/..."
            return (
                f"make {target}: {var}={value} starts with a literal ~ that was not expanded "
                f"(a ~ after = is left as it is); write {var}={fixed} or the full path"
            )
    if not src or not data:
        return None
    s, d = Path(src).resolve(), Path(data).resolve()
    if d == s or s in d.parents:
        return (
            f"make {target}: DATA={data} is inside SRC={src}: the packs would be written into "
            "the download itself; choose a DATA folder outside SRC (e.g. DATA=data)"
        )
    for name in names:
        out = d / name
        if out == s or out in s.parents:
            what = "be SRC itself" if out == s else f"hold SRC={src}"
            return (
                f"make {target}: the pack folder {Path(data) / name} would {what}; choose "
                "another DATA folder (e.g. DATA=data)"
            )
    return None


def main(argv: list[str]) -> int:
    target, src, data, *names = argv
    message = problem(target, src, data, names)
    if message:
        print(message, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]) if len(sys.argv) >= 4 else 2)
