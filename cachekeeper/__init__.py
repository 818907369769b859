"""cachekeeper: prebuild, publish and hydrate compiler caches for PyTorch models.

The Python API (`cachekeeper.hydrate`, `cachekeeper.env`, `cachekeeper.capture`, see `cachekeeper.api`) is
loaded on first use, so `import cachekeeper` stays cheap and never imports torch. No subpackage shares a
public function's name (the boot side lives in `cachekeeper.hydration`), so a plain module `__getattr__` serves them.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing would double this module's import time

__version__ = "0.1.0"
__all__ = ["CaptureReport", "HydrateReport", "__version__", "capture", "env", "hydrate"]

if TYPE_CHECKING:
    from typing import Any

    from .api import capture, env, hydrate
    from .captures.capture import CaptureReport
    from .hydration.engine import HydrateReport

_LAZY = {
    "hydrate": "cachekeeper.api",
    "env": "cachekeeper.api",
    "capture": "cachekeeper.api",
    "HydrateReport": "cachekeeper.hydration.engine",
    "CaptureReport": "cachekeeper.captures.capture",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'cachekeeper' has no attribute {name!r}")
