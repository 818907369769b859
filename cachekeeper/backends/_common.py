"""Deprecated: split into `toolchain.py` (host side) and `build_main.py` (build subprocess side).

Kept so a plugin that imported a helper from here still loads; each name warns once per use site with its
new spelling.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

_HOST = "cachekeeper.backends.toolchain"
_BUILD = "cachekeeper.backends.build_main"


def __getattr__(name: str) -> Any:
    for module in (_HOST, _BUILD):
        target = importlib.import_module(module)
        if hasattr(target, name) and not name.startswith("__"):
            warnings.warn(f"cachekeeper.backends._common.{name} is deprecated: import it from {module}",
                          DeprecationWarning, stacklevel=2)
            return getattr(target, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
