# The compiled one-pass blend (_lerp.c), for type checkers.
import numpy as np

def blend_frames(
    out: np.ndarray,
    obs: np.ndarray,
    frames: np.ndarray,
    index: np.ndarray,
    flipped: np.ndarray | None,
    keep: np.ndarray | None,
    keep_strides: tuple[int, int, int],
    kind: int,
    alpha: np.ndarray,
    alpha_step: int,
    plain: bool,
    n: int,
    k: int,
    h: int,
    w: int,
    threads: int,
) -> None: ...
