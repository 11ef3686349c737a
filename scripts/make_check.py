"""The checks the Makefile's dataset targets run before packing: SRC and DATA as make got them.

    python scripts/make_check.py TARGET SRC DATA PACK_NAME...

Refuses (exit 1, one message) a literal `~` (bash expands `SRC=~/...`; sh, zsh and a quoted
`'~'` do not), a SRC that does not exist or holds the folder the target packs one level down
(`val2017/`, `places365_standard/`), a DATA that is SRC or inside it (the packs would be
written into the download), and a pack folder DATA/PACK_NAME that is SRC or holds it.
"""

from __future__ import annotations

import sys
from pathlib import Path

_WANTED = {
    "places365": "the places365_standard folder (train/<class>/*.jpg, val/<class>/*.jpg) or "
    "places365standard_easyformat.tar (http://places2.csail.mit.edu/download.html)",
    "coco": "COCO's val2017 folder or val2017.zip (http://images.cocodataset.org/zips/val2017.zip)",
    "dmcgb-videos": "DMC-GB's src/env/data folder (video_easy/, video_hard/)",
    "dbc-videos": "the folder of DBC's natural videos (the files its --resource_files names)",
    "davis": "DAVIS 2017's trainval folder or .zip (JPEGImages/480p/<clip>/00000.jpg ...)",
}
_DOWNLOADS = ("places365", "coco")  # the targets that download when SRC is unset
# the folder each target packs, found one level down in a SRC given too high
_INNER = {"places365": "places365_standard", "coco": "val2017"}


def _inner(target: str, src: Path) -> Path | None:
    name = _INNER.get(target)
    if name is None or src.name == name or not (src / name).is_dir():
        return None
    return src / name


def problem(target: str, src: str, data: str, names: list[str]) -> str | None:
    for var, value in (("SRC", src), ("DATA", data)):
        if value.startswith("~"):
            fixed = "$HOME" + value[1:] if value.startswith("~/") else "$HOME/..."
            return (
                f"make {target}: {var}={value} starts with a literal ~ that was not expanded "
                f"(bash expands it; sh, zsh and quotes leave it); write {var}={fixed} or the full "
                "path"
            )
    if src and not Path(src).exists():
        return (
            f"make {target}: SRC={src} does not exist (from {Path.cwd()}); give the path of "
            f"{_WANTED.get(target, 'the source')}"
            + (", or leave SRC unset to download it" if target in _DOWNLOADS else "")
        )
    if src and Path(src).is_dir() and (inner := _inner(target, Path(src))):
        return f"make {target}: SRC={src} holds {inner.name}/: pass that folder, SRC={inner}"
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
