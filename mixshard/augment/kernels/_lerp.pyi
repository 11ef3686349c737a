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
def place(
    out: Any,
    src: Any,
    at: Any | None,
    rows: Any | None,
    flipped: Any | None,
    m: int,
    image: int,
    width: int,
) -> None: ...
def keyed(out: Any, env: Any, episode: Any, key: int, stream: int) -> None: ...
def mixed(
    out: Any, env: Any, episode: Any, words: Any, base: Any, limit: Any, key: int, stream: int
) -> None: ...
def draws(
    clip: Any,
    env: Any,
    episode: Any,
    start: Any | None,
    flipped: Any | None,
    length: Any | None,
    key: int,
    clips: int,
    order: int,
    random_start: int,
    flip: int,
) -> None: ...
def wide(on: bool = ...) -> bool: ...
