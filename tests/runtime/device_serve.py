"""A server on a SIMULATED device runtime (tests/simulated/pkgs: torch_neuronx or torch_tpu, which copy the real
runtimes' caches and counters and cite where each was read), wrapped in `watch()`: a tiny module compiled with
`torch.compile(backend="neuron" | "tpu")`, one call per height given (`rows x 4` inputs: another height is
another graph). Under CACHEKEEPER_STRICT=fail a compile is refused right after it ran: these runtimes tell only
afterwards (docs/backends.md, "Strict serving").

    python -m tests.runtime.device_serve neuron 8 16
    OLD_TORCH_TPU=1: torch_tpu without `_get_cache_stats` (its tier-1 counters only), as an older release.

Prints one JSON line: each call's refusal (class, message, whether the compile ran) or null, the runtime's own
counters, and the compile ledger's summary.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any

PACKAGES = {"neuron": "torch_neuronx", "tpu": "torch_tpu"}


def main() -> None:
    backend, heights = sys.argv[1], [int(h) for h in sys.argv[2:]]
    import torch

    runtime = importlib.import_module(PACKAGES[backend])
    if os.environ.get("OLD_TORCH_TPU"):
        ops = importlib.import_module("torch_tpu._internal.device._device_ops_backend")
        del ops._get_cache_stats

    from cachekeeper.errors import CompileRefused
    from cachekeeper.runtime import compile_ledger, watch

    torch.manual_seed(0)
    model = torch.compile(torch.nn.Linear(4, 4), backend=backend, fullgraph=True, dynamic=False)

    def pipe(prompt: str, *, height: int, width: int) -> Any:
        with torch.no_grad():
            return model(torch.ones(height, 4))

    served = watch(pipe, model="tiny-linear")
    calls: list[dict[str, Any]] = []
    for height in heights:
        try:
            served("a cat", height=height, width=64)
            calls.append({"height": height, "refused": None})
        except CompileRefused as exc:
            calls.append({"height": height, "refused": type(exc).__name__, "message": exc.message,
                          "compiled": exc.compiled})
    print(json.dumps({"calls": calls, "runtime": runtime.SIMULATION.stats(), "ledger": compile_ledger().summary()}))


if __name__ == "__main__":
    main()
