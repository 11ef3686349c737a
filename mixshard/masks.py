"""`mixshard.masks`: the keep masks for `composite`, importable as a module of their own
(`import mixshard.masks`, `from mixshard.masks import green_screen`).

The builders live in `mixshard.augment.masks.builders` (with `composite`'s mask checks); this module
re-exports their public names (its `__all__`, listed once there), and is imported only when named,
so `import mixshard` still loads no torch.
"""

from __future__ import annotations

from .augment.masks import builders as _builders
from .augment.masks.builders import *  # noqa: F403

__all__ = list(_builders.__all__)
