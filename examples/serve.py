"""Serve-side view of a compile cache: load a component, compile it, time the first call.

Prints one JSON line (parsed by the tests and benchmarks/cold_start.py):
    {"first_call_s": ..., "process_s": ..., "fxgraph_cache_hit": ..., "fxgraph_cache_miss": ..., ...}

The cache it reads is TORCHINDUCTOR_CACHE_DIR (what `cachekeeper hydrate --print-env` exports), or
--cache-dir. The compile call is the same as the prebuild's (cachekeeper.backends.inductor.build), which
is what makes the graph keys match.

    python examples/serve.py examples/models/tiny-flux --component transformer --height 64 --width 64
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

T_START = time.perf_counter()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="time the first compiled call of a diffusers component")
    ap.add_argument("model", help="local diffusers folder (pipeline layout) or component folder")
    ap.add_argument("--component", default="transformer")
    ap.add_argument("--mode", default="full", choices=["full", "repeated_blocks", "aot"],
                    help="aot: precompiled functions of the hydrated dir via cachekeeper.runtime")
    ap.add_argument("--height", type=int, default=64)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--inputs", default="auto", help="auto | flux | unet | module:function")
    ap.add_argument("--cache-dir", help="TORCHINDUCTOR_CACHE_DIR for this process")
    ap.add_argument("--mega-cache-load", metavar="FILE", help="torch.compiler.load_cache_artifacts(FILE) first")
    ap.add_argument("--mega-cache-save", metavar="FILE", help="torch.compiler.save_cache_artifacts() after")
    ap.add_argument("--compare-eager", action="store_true", help="also report max |compiled - eager|")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.cache_dir:  # before torch is imported: Inductor reads it once
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.abspath(args.cache_dir)

    import torch
    from torch._dynamo.utils import counters as dynamo_counters

    from cachekeeper.backends.base import ModelRef
    from cachekeeper.backends.build_main import load_component
    from cachekeeper.backends.inductor import build
    from cachekeeper.backends.warmup import build_inputs
    from cachekeeper.format.spec import Shape

    t_import = time.perf_counter() - T_START
    mega_load_s = 0.0
    if args.mega_cache_load:
        t = time.perf_counter()
        with open(args.mega_cache_load, "rb") as f:
            torch.compiler.load_cache_artifacts(f.read())
        mega_load_s = time.perf_counter() - t

    ref = ModelRef(name=os.path.basename(args.model.rstrip("/")), component=args.component, path=args.model,
                   inputs=args.inputs)
    t = time.perf_counter()
    model = load_component(ref, args.dtype).to(args.device)
    load_s = time.perf_counter() - t
    helper: dict[str, object] = {}
    if args.mode == "aot":  # precompiled functions, else torch.compile as the prebuild did
        from cachekeeper.runtime import compile_component

        compiled = compile_component(model)
    else:
        compiled = build.compile_model(model, args.mode, {})
    inputs = build_inputs(model, ref, Shape(args.height, args.width, args.batch), args.dtype, args.device)
    first_call_s = build.first_call(compiled, inputs, args.device)
    if args.compare_eager:
        from cachekeeper.backends.inductor.aot import max_abs_diff

        with torch.no_grad():
            helper["max_abs_diff"] = max_abs_diff(compiled(**inputs), model(**inputs))
    if args.mode == "aot":
        helper.update(precompiled_calls=compiled.stats.precompiled_calls,
                      fallback_calls=compiled.stats.fallback_calls, fallbacks=compiled.stats.fallbacks)

    if args.mega_cache_save:
        saved = torch.compiler.save_cache_artifacts()
        if saved is None:
            sys.exit("serve: error: torch.compiler.save_cache_artifacts() returned nothing")
        with open(args.mega_cache_save, "wb") as f:
            f.write(saved[0])

    print(json.dumps({
        "first_call_s": round(first_call_s, 3),
        "process_s": round(time.perf_counter() - T_START, 3),
        "import_s": round(t_import, 3),
        "load_s": round(load_s, 3),
        "mega_cache_load_s": round(mega_load_s, 3),
        **build.breakdown(build.phase_times()),
        **build.counters(),
        **helper,
        "dynamo_frames": int(dynamo_counters["frames"]["total"]),
        "cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR", ""),
    }), flush=True)


if __name__ == "__main__":
    main()
