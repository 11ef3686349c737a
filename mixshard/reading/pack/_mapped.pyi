# The guarded copies out of mapped shards (_mapped.c), for type checkers.
import numpy as np

def copy_rows(
    out: np.ndarray,
    rows: np.ndarray,
    maps: np.ndarray,
    offsets: np.ndarray,
    bases: np.ndarray,
    lengths: np.ndarray,
    row_bytes: int,
) -> tuple[int, int]: ...
def read_rows(
    out: np.ndarray, rows: np.ndarray, fds: np.ndarray, offsets: np.ndarray, row_bytes: int
) -> tuple[int, int]: ...
