"""A SIMULATED static-shape device server: each (model, shape) runs a graph from its cache dir,
compiling it first (slowly) when the dir lacks it, as Neuron and TPU runtimes do. Wrapped by
`cachekeeper.runtime.watch`, the one line a serving process adds. Prints its compile count as JSON.

    FAKE_CACHE_DIR=DIR python -m tests.reports.sim_serve HEIGHT WIDTH [CALLS]
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from cachekeeper.runtime import watch

COMPILE_S = 0.3


class SimPipeline:
    def __init__(self, cache: Path) -> None:
        self.cache = cache
        self.compiles = 0

    def __call__(self, prompt: str, *, height: int, width: int, num_images_per_prompt: int = 1,
                 guidance_scale: float | None = None) -> dict[str, Any]:
        graph = self.cache / "graphs" / f"tiny-{height}x{width}x{num_images_per_prompt}.neff"
        if not graph.exists():
            time.sleep(COMPILE_S)
            graph.parent.mkdir(parents=True, exist_ok=True)
            tmp = graph.with_name(f".{graph.name}.tmp")
            tmp.write_bytes(b"compiled at serving time")
            os.replace(tmp, graph)
            self.compiles += 1
        time.sleep(0.01)
        return {"images": [prompt] * num_images_per_prompt}


def main() -> None:
    height, width = int(sys.argv[1]), int(sys.argv[2])
    calls = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    cache = Path(os.environ["FAKE_CACHE_DIR"])
    sim = SimPipeline(cache)
    pipe = watch(sim, model="tiny", cache_dirs=[cache])
    for _ in range(calls):
        pipe("a cat", height=height, width=width)
    print(json.dumps({"compiled": sim.compiles}))


if __name__ == "__main__":
    main()
