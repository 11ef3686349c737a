# The compiled resize (_resize.c), for type checkers.
import numpy as np

def resize(
    out: np.ndarray,
    pixels: np.ndarray,
    height: int,
    width: int,
    rows: np.ndarray,
    row_weights: np.ndarray,
    cols: np.ndarray,
    col_weights: np.ndarray,
    whole: bool,
) -> None: ...
