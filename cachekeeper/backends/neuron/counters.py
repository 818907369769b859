"""TorchNeuron's compile counters as a build or check process reads them (build side: imports torch_neuronx).

0.1.0 `torch_neuronx/metrics.py`: `get_counter_value("CompilationCache.TotalCompilations")` (NEFFs this
process compiled) and `"CompilationCache.PersistentHits"` (NEFFs it read from the persistent dir). They count
only when TORCH_NEURONX_METRICS_ENABLED=1 at start-up (csrc/core/metrics/NeuronMetrics.h): every build and
the device check's server run with it (NeuronBackend.build_env). A counter never touched reads None: 0.
"""

from __future__ import annotations

import importlib


def _value(name: str) -> int:
    value = importlib.import_module("torch_neuronx.metrics").get_counter_value(name)
    return int(value or 0)


def compiled() -> int:
    return _value("CompilationCache.TotalCompilations")


def loaded() -> int:
    return _value("CompilationCache.PersistentHits")
