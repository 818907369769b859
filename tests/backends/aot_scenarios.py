"""Run by tests/backends/test_inductor_aot.py in a fresh process: cachekeeper.runtime against damaged copies
of a hydrated aot dir, one JSON line per scenario. Not a test module (no test_ prefix).

    python aot_scenarios.py MODEL_DIR SCENARIO=CACHE_DIR [SCENARIO=CACHE_DIR ...]

Scenarios whose name starts with "call:" call the helper with the prebuilt inputs and compare with eager;
"shape:" asks about a 32x32 call, "args:" about return_dict=True (neither runs a compile).
"""

from __future__ import annotations

import json
import sys

import torch

from cachekeeper.backends.base import ModelRef
from cachekeeper.backends.build_main import load_component
from cachekeeper.backends.inductor.aot import max_abs_diff
from cachekeeper.backends.warmup import build_inputs
from cachekeeper.format.spec import Shape
from cachekeeper.runtime import compile_component


def main(model_dir: str, scenarios: list[str]) -> None:
    ref = ModelRef("tiny-flux", "transformer", path=model_dir, inputs="flux")
    model = load_component(ref, "float32")
    inputs = build_inputs(model, ref, Shape(64, 64, 1), "float32", "cpu")
    with torch.no_grad():
        want = model(**inputs)
    for item in scenarios:
        name, _, cache_dir = item.partition("=")
        kind = name.split(":", 1)[0]
        helper = compile_component(model, cache_dir)
        out: dict[str, object] = {"scenario": name}
        if kind == "call":
            with torch.no_grad():
                out["max_abs_diff"] = max_abs_diff(helper(**inputs), want)
        elif kind == "shape":
            out["precompiled"] = helper.precompiled_for(
                **build_inputs(model, ref, Shape(32, 32, 1), "float32", "cpu"))
        elif kind == "args":
            out["precompiled"] = helper.precompiled_for(**{**inputs, "return_dict": True})
        elif kind == "match":
            out["precompiled"] = helper.precompiled_for(**inputs)
        out.update(precompiled_calls=helper.stats.precompiled_calls, fallback_calls=helper.stats.fallback_calls,
                   fallbacks=helper.stats.fallbacks)
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
