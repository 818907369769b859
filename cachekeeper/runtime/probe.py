"""What compiled between two moments of a serving process: each loaded runtime's own counters, cross-checked
with new files in the served dirs.

    before = snapshot(dirs); ...; what = compiled(before, snapshot(dirs))

The counters are the ones a build and the device check read (`backends/counters.py` and each backend's
`counters.py`, named by its toolchain): Inductor's FX-graph and AOTAutograd cache misses (and its autotune
benchmarks), TorchNeuron's `CompilationCache.TotalCompilations`, TorchTPU's per-entry stats with
`compilation_duration > 0`. A runtime is read only once its package is loaded in this process (a serving
process never imports one for us). A runtime whose counters say nothing here (Neuron metrics off, a TorchTPU
without `_get_cache_stats`) is left to the files, said once (`notes`): a compile is then what added files to the
served dir, never a zero counter read as "nothing compiled".
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .miss_watch import cache_counts, new_files

# The device runtimes read here: backend name -> the package whose import means it may compile in this process.
DEVICE_PACKAGES = {"neuron": "torch_neuronx", "tpu": "torch_tpu"}
INDUCTOR = "inductor"
AUTOTUNE_COUNTERS = ("select_algorithm_autotune", "combo_autotune_bench")


@dataclass(frozen=True)
class Snapshot:
    counters: Mapping[str, int]                  # "inductor.fx", "inductor.aot", "inductor.autotune", "<dev>"
    seconds: Mapping[str, float]                 # a runtime's own compile seconds, where it keeps them
    files: Mapping[str, int]                     # complete files per dir (miss_watch.cache_counts)
    at: float = field(default_factory=time.perf_counter)


@dataclass(frozen=True)
class Compiled:
    """What ran between two snapshots: graphs the runtimes compiled (0: none they counted), their seconds,
    new files in the served dirs, and how it was seen."""

    backend: str
    graphs: int
    seconds: float
    new_files: int
    source: str              # "runtime" (its own counters) or "files" (only new files said so)
    autotune: bool = False

    @property
    def any(self) -> bool:
        return self.graphs > 0 or self.new_files > 0


_NOTES: list[str] = []   # the runtimes whose counters say nothing here, said once per process


def notes() -> list[str]:
    return list(_NOTES)


def note(line: str) -> None:
    import logging

    if line not in _NOTES:
        _NOTES.append(line)
        logging.getLogger("cachekeeper.runtime").warning("cachekeeper: warning: %s", line)


def _inductor() -> dict[str, int]:
    dynamo = sys.modules.get("torch._dynamo.utils")
    counters = getattr(dynamo, "counters", None)
    if counters is None:
        return {}
    from ..backends.inductor.build import counters as inductor_counters  # the build's own reading

    c = inductor_counters()
    return {"inductor.fx": c["fxgraph_cache_miss"], "inductor.aot": c["autograd_cache_miss"],
            "inductor.autotune": sum(int(counters["inductor"][name]) for name in AUTOTUNE_COUNTERS)}


def _device(name: str) -> tuple[int | None, float | None]:
    """(compiled so far, compile seconds so far) of a loaded device runtime; (None, None) when its counters
    say nothing here (said once)."""
    from ..backends import backend_class
    from ..backends.counters import compile_seconds, counters_unavailable, runtime_counters

    counters = getattr(getattr(backend_class(name), "toolchain", None), "counters", None) or {}
    why = counters_unavailable(counters)
    if why:
        note(f"{name}: {why}; compiles are seen by new files in the served dir only")
        return None, None
    return runtime_counters(counters).get("compiled"), compile_seconds(counters)


def snapshot(dirs: Iterable[Path]) -> Snapshot:
    counters: dict[str, int] = dict(_inductor())
    seconds: dict[str, float] = {}
    for name, package in DEVICE_PACKAGES.items():
        if package in sys.modules:
            compiled, secs = _device(name)
            if compiled is not None:
                counters[name] = compiled
            if secs is not None:
                seconds[name] = secs
    return Snapshot(counters, seconds, cache_counts(dirs))


def compiled(before: Snapshot, after: Snapshot, backend: str | None = None) -> Compiled:
    """What compiled between `before` and `after` (taken over the same dirs)."""
    def grew(key: str) -> int:
        return max(0, after.counters.get(key, 0) - before.counters.get(key, 0)) if key in after.counters else 0

    by = {name: grew(name) for name in DEVICE_PACKAGES}
    by[INDUCTOR] = max(grew("inductor.fx"), grew("inductor.aot"))
    added = new_files(before.files, after.files)
    counted = {k: v for k, v in by.items() if v}
    name = backend or (max(counted, key=lambda k: counted[k]) if counted else served_backend())
    graphs = sum(counted.values())
    runtime_s = sum(max(0.0, after.seconds.get(k, 0.0) - before.seconds.get(k, 0.0)) for k in after.seconds)
    seconds = runtime_s or (after.at - before.at if graphs or added else 0.0)
    return Compiled(name, graphs, seconds, added, "runtime" if graphs else "files",
                    autotune=grew("inductor.autotune") > 0)


def served_backend() -> str:
    """The backend this process most likely serves with: a loaded device runtime's, else Inductor."""
    for name, package in DEVICE_PACKAGES.items():
        if package in sys.modules:
            return name
    return INDUCTOR


__all__ = ["Compiled", "Snapshot", "compiled", "note", "notes", "served_backend", "snapshot"]
