"""Check that a clip pack holds every clip of a benchmark's list (the Makefile's video targets
run it after packing).

    python scripts/check_clips.py PACK LIST      # LIST: dmcgb-video_easy, davis17-train, ...

Exit 0 and one line when the pack holds them all; exit 1 and the error (naming the pack and
the clips it lacks) when not.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's mixshard

from mixshard.core.errors import MixshardError  # noqa: E402
from mixshard.core.manifest import Manifest  # noqa: E402
from mixshard.core.presets import check_clip_pack  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    pack, name = argv
    try:
        check_clip_pack(Manifest.load(pack), pack, name)
    except (MixshardError, ValueError) as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    print(f"{pack} holds the {name} clips")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
