"""TorchTPU's compile counters as a build or check process reads them (build side: imports torch_tpu).

`_get_cache_hits()` counts tier-1 (in-process memory) hits only and `_get_cache_misses()` is requests minus
hits ([dev] compilation_cache.cc, GetStaticCacheEntry): every first use in a fresh process is a "miss", also
when tier 2 or the hydrated tier 3 served it. `_get_cache_stats()` (0.2.0: `_device_ops_backend`) returns a
PerfStats whose `per_entry_stats[i].compilation_duration` is zero for an executable loaded from tier 2 or 3
and positive only when this process compiled it. So:

  compiled   entries with compilation_duration > 0     (this process ran the compiler)
  loaded     entries with compilation_duration == 0    (read from tier 2 or tier 3)
  requests   num_cache_reqs
  seconds    the compilation_duration of those compiled, summed

An older TorchTPU without `_get_cache_stats` has only the tier-1 hit/miss counters, which cannot tell a
compile from a tier-3 read: `unavailable()` says so, and a serving process falls back to the tier-3 files.
"""

from __future__ import annotations

import importlib
from typing import Any

OPS = "torch_tpu._internal.device._device_ops_backend"


def _stats() -> Any:
    return importlib.import_module(OPS)._get_cache_stats()


def _seconds(duration: Any) -> float:
    """A timedelta (pybind's chrono conversion) or a plain number of microseconds."""
    total = getattr(duration, "total_seconds", None)
    return float(total()) if callable(total) else float(duration or 0)


def durations() -> list[float]:
    return [_seconds(e.compilation_duration) for e in _stats().per_entry_stats]


def compiled() -> int:
    return sum(1 for d in durations() if d > 0)


def loaded() -> int:
    return sum(1 for d in durations() if d <= 0)


def requests() -> int:
    return int(_stats().num_cache_reqs)


def seconds() -> float:
    return sum(d for d in durations() if d > 0)


def unavailable() -> str:
    """Why the per-entry stats are not there ("" when they are)."""
    try:
        ops = importlib.import_module(OPS)
    except ImportError as exc:
        return f"{OPS} cannot be imported ({exc})"
    if not callable(getattr(ops, "_get_cache_stats", None)):
        return ("this torch_tpu has no _get_cache_stats (its hit/miss counters count tier 1 only and cannot tell "
                "a compile from a tier-3 read)")
    return ""
