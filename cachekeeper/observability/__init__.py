"""What cachekeeper tells the systems that watch it: `logs` (the CLI's one stderr logger, human or JSON;
stdlib only) and `metrics` (every Prometheus metric, defined once; imported only when metrics are asked
for, as `prometheus_client` is the `metrics` extra)."""

from __future__ import annotations

from types import ModuleType


def metrics_or_warn(flag: str) -> ModuleType | None:
    """`observability.metrics`, or None after one warning when the `metrics` extra is not installed: a
    missing library costs the metrics, never the run."""
    try:
        from . import metrics
    except ImportError as exc:
        from . import logs

        logs.warning(f"{flag}: metrics need prometheus_client ({exc}); install `cachekeeper[metrics]`. The run "
                     "itself is unaffected")
        return None
    return metrics
