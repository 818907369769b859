"""TorchNeuron's compile counters, as a build, the device check's server and a serving process read them
(imports torch_neuronx when called: the process that runs it has it loaded).

0.1.0 `torch_neuronx/metrics.py`: `get_counter_value("CompilationCache.TotalCompilations")` (NEFFs this
process compiled) and `"CompilationCache.PersistentHits"` (NEFFs it read from the persistent dir). They count
only with metrics on: TORCH_NEURONX_METRICS_ENABLED=1/true/yes at start-up, or `metrics.set_enabled(True)`
later; `metrics.is_enabled()` says which (csrc/core/metrics/NeuronMetrics.h, IsMetricsEnabled; NeuronBindings.cpp
`_neuron_metrics_enabled`). Every build and the device check's server run with it (NeuronBackend.build_env).
A counter never touched reads None: 0. With metrics off every counter reads None, which is not "nothing
compiled": `unavailable()` says so, and a serving process falls back to the NEFF dir's files.
"""

from __future__ import annotations

import importlib
import os

from .backend import METRICS_ENV

ON = ("1", "true", "yes")   # what 0.1.0 reads as on (metrics.py's docstring; NeuronMetrics.h)


def _value(name: str) -> int:
    value = importlib.import_module("torch_neuronx.metrics").get_counter_value(name)
    return int(value or 0)


def compiled() -> int:
    return _value("CompilationCache.TotalCompilations")


def loaded() -> int:
    return _value("CompilationCache.PersistentHits")


def unavailable() -> str:
    """Why the counters say nothing in this process ("" when metrics are on)."""
    metrics = importlib.import_module("torch_neuronx.metrics")
    is_enabled = getattr(metrics, "is_enabled", None)
    # Without `is_enabled` (older builds): the variable, as read at start-up.
    on = bool(is_enabled()) if callable(is_enabled) else os.environ.get(METRICS_ENV, "").strip().lower() in ON
    return "" if on else f"torch_neuronx metrics are off ({METRICS_ENV} is not 1 at start-up): its compile " \
                         "counters stay at zero"
