"""A SIMULATED static-shape device server (tests/reports/sim_serve.py's: a graph per shape in its cache dir,
written when missing) wrapped in `watch(pipe, config=...)`, under whatever strict mode CACHEKEEPER_STRICT sets.
The fake runtime has no counters of its own, so the ledger sees its compiles by the files they add.

    FAKE_CACHE_DIR=<served dir> python -m tests.runtime.strict_serve CONFIG 96x64 [64x64 ...]

Prints one JSON line: each call's shape, whether it raised (the error's class, message, fields) and the graphs
the server compiled, and the compile ledger's summary.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from cachekeeper.config import load_config
from cachekeeper.errors import CachekeeperError
from cachekeeper.runtime import compile_ledger, watch
from tests.reports.sim_serve import SimPipeline


def main() -> None:
    config, shapes = sys.argv[1], sys.argv[2:]
    cache = Path(os.environ["FAKE_CACHE_DIR"])
    sim = SimPipeline(cache)
    pipe = watch(sim, model="tiny", cache_dirs=[cache], config=load_config(config))
    calls: list[dict[str, Any]] = []
    for shape in shapes:
        height, width = (int(x) for x in shape.split("x")[:2])
        before = sim.compiles
        try:
            pipe("a cat", height=height, width=width)
            calls.append({"shape": shape, "error": None, "compiled": sim.compiles - before})
        except CachekeeperError as exc:
            calls.append({"shape": shape, "error": type(exc).__name__, "message": exc.message, "key": exc.key,
                          "exit_code": exc.exit_code, "compiled": sim.compiles - before})
    print(json.dumps({"calls": calls, "ledger": compile_ledger().summary()}))


if __name__ == "__main__":
    main()
