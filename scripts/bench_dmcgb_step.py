"""`compat.VideoWrapper`'s background step (green-screen mask + paste of the frame) against
DMC-GB's `do_green_screen` on the same 84 px frame: a real video_hard frame under a green sky,
interleaved, 5 rounds, medians. DMC-GB's two functions are read from its checkout and run as
they are (not part of this project); run it where DMC-GB's imports resolve (torchvision).

    MIXSHARD_DATA=DATA python scripts/bench_dmcgb_step.py DMCGB_CHECKOUT REAL_VIDEOS
"""

from __future__ import annotations

import ast
import statistics
import sys
import time
from pathlib import Path

import av
import numpy as np
import torch
import torchvision.transforms.functional as TF

from mixshard.compat import VideoWrapper


def dmcgb_green_screen(checkout: Path):
    """DMC-GB's own `do_green_screen` (and its `rgb_to_hsv`), from its `src/env/wrappers.py`."""
    tree = ast.parse((checkout / "src" / "env" / "wrappers.py").read_text())
    space = {"np": np, "torch": torch, "TF": TF}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in ("rgb_to_hsv", "do_green_screen"):
            exec(compile(ast.Module([node], []), "wrappers.py", "exec"), space)
    return space["do_green_screen"]


class Still:
    """An environment whose every observation is one frame."""

    _max_episode_steps = 10

    def __init__(self, frame: np.ndarray) -> None:
        self.frame = frame

    def reset(self) -> np.ndarray:
        return self.frame.copy()


def main() -> None:
    torch.set_num_threads(1)
    do_green_screen = dmcgb_green_screen(Path(sys.argv[1]))
    with av.open(str(Path(sys.argv[2]) / "video_hard2.mp4")) as container:
        rgb = next(container.decode(video=0)).to_ndarray(format="rgb24")
    frame = rgb[100:184, 100:184].transpose(2, 0, 1).copy()
    frame[:, :40] = np.array([40, 170, 60], np.uint8)[:, None, None]  # a green sky
    env = VideoWrapper(Still(frame), "video_hard", 0)
    env.reset()
    bg = env._background((84, 84))[0].numpy()
    assert np.array_equal(env._greenscreen(frame), do_green_screen(frame.copy(), bg.copy()))

    def median(call, n: int) -> float:
        seconds = []
        for i in range(n):
            env._current_frame = i
            t0 = time.perf_counter()
            call()
            seconds.append(time.perf_counter() - t0)
        return statistics.median(seconds)

    for r in range(5):
        theirs = median(lambda: do_green_screen(frame.copy(), bg.copy()), 20)
        ours = median(lambda: env._greenscreen(frame), 300)
        print(
            f"round {r}: do_green_screen {theirs * 1e3:.2f} ms, VideoWrapper step "
            f"{ours * 1e6:.1f} us: {theirs / ours:.0f}x"
        )


if __name__ == "__main__":
    main()
