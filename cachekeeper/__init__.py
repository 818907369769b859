"""cachekeeper: prebuild, publish and hydrate compiler caches for PyTorch models.

The Python API (`cachekeeper.hydrate`, `cachekeeper.env`, `cachekeeper.capture`, see `cachekeeper.api`) is
loaded on first use, so `import cachekeeper` stays cheap and never imports torch.
"""

from __future__ import annotations

import importlib
import sys
import types

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: importing typing would double this module's import time

__version__ = "0.1.0"
__all__ = ["CaptureReport", "HydrateReport", "__version__", "capture", "env", "hydrate"]

if TYPE_CHECKING:
    from typing import Any

    from .api import capture, env, hydrate
    from .boot.capture import CaptureReport
    from .boot.hydrate import HydrateReport


def _api(name: str) -> property:
    """`hydrate` and `capture` are also subpackage/module names: importing one makes the import system
    set it on this package, and the setter keeps the API function visible under the public name."""

    def get(self: types.ModuleType) -> Any:
        return getattr(importlib.import_module("cachekeeper.api"), name)

    def keep_submodule(self: types.ModuleType, value: Any) -> None:
        self.__dict__[f"_{name}_module"] = value

    return property(get, keep_submodule)


class _Package(types.ModuleType):
    hydrate = _api("hydrate")
    env = _api("env")
    capture = _api("capture")


def __getattr__(name: str) -> Any:
    if name == "HydrateReport":
        return importlib.import_module("cachekeeper.boot.hydrate").HydrateReport
    if name == "CaptureReport":
        return importlib.import_module("cachekeeper.boot.capture").CaptureReport
    raise AttributeError(f"module 'cachekeeper' has no attribute {name!r}")


sys.modules[__name__].__class__ = _Package
