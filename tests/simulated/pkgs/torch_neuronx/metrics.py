"""SIMULATION of torch_neuronx/metrics.py (0.1.0): `get_counter_value(name)` for the compilation cache's
counters, collected only when TORCH_NEURONX_METRICS_ENABLED was 1/true/yes at start-up (the C++ macros are
no-ops otherwise: csrc/core/metrics/NeuronMetrics.h:262-275), else None as for a counter never touched;
`is_enabled()` says which (0.1.0 metrics.py, `_C._neuron_metrics_enabled`)."""

from __future__ import annotations

_NAMES = {"CompilationCache.TotalCompilations": "compiled", "CompilationCache.PersistentHits": "loaded"}


def get_counter_value(name: str) -> int | None:
    import torch_neuronx

    if not torch_neuronx.METRICS_ENABLED or name not in _NAMES:
        return None
    return torch_neuronx._CACHE.stats()[_NAMES[name]]


def is_enabled() -> bool:
    import torch_neuronx

    return bool(torch_neuronx.METRICS_ENABLED)
