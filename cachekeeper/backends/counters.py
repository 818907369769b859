"""A runtime's own compile counters, read the same way by a build, the device check's server and a serving
process (`cachekeeper.runtime`'s compile ledger and strict mode).

A device backend's toolchain names its counters as "module:function" (`DeviceToolchain.counters`: "compiled",
"loaded", ...), each returning an int. A counters module may also define:

  * `unavailable() -> str`: why its counters say nothing in this process ("" when they can be trusted):
    TorchNeuron counts only with TORCH_NEURONX_METRICS_ENABLED=1 at start-up, an old TorchTPU has no
    `_get_cache_stats`. A reader then falls back to the served dir's files, never to a zero.
  * `seconds() -> float`: compile seconds so far, where the runtime times its compiles (TorchTPU's
    per-entry `compilation_duration`).

Light: a runtime's package is imported only when a counter is read, by the process that runs it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any


def _module(target: str) -> Any:
    return importlib.import_module(target.partition(":")[0])


def runtime_counters(counters: Mapping[str, str]) -> dict[str, int]:
    """Each "module:function" counter of the runtime, called now."""
    out = {}
    for name, target in counters.items():
        module, _, function = target.partition(":")
        out[name] = int(getattr(importlib.import_module(module), function)())
    return out


def counters_unavailable(counters: Mapping[str, str]) -> str:
    """Why the runtime's counters cannot be read or trusted here ("" when they can), in one line."""
    if not counters:
        return "the runtime has no compile counters"
    for module in sorted({target.partition(":")[0] for target in counters.values()}):
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            return f"{module} cannot be imported ({exc})"
        check = getattr(mod, "unavailable", None)
        if callable(check) and (why := check()):
            return str(why)
    return ""


def compile_seconds(counters: Mapping[str, str]) -> float | None:
    """Compile seconds so far by the runtime's own clock, or None where it keeps none."""
    for module in sorted({target.partition(":")[0] for target in counters.values()}):
        seconds = getattr(importlib.import_module(module), "seconds", None)
        if callable(seconds):
            return float(seconds())
    return None


__all__ = ["compile_seconds", "counters_unavailable", "runtime_counters"]
