# The compiled CPU pass (_lerp.c), for type checkers. A buffer is a numpy array or a tensor's
# memory as (address, bytes, tensor).
from typing import Any

PARAMS: int

def composite(
    out: Any,
    obs: Any,
    bg: Any,
    index: Any | None,
    flipped: Any | None,
    keep: Any | None,
    key_source: Any | None,
    values: Any | None,
    ids: Any | None,
    alpha: Any,
    params: Any,
) -> None: ...
def keyed(out: Any, env: Any, episode: Any, key: int, stream: int) -> None: ...
