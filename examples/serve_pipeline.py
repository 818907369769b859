"""What a server does with a diffusers pipeline on Inductor, and nothing else: load it, compile the
transformer with the documented call, run `pipe(...)`. In modes full and repeated_blocks no cachekeeper
import: the hydrated cache dir (TORCHINDUCTOR_CACHE_DIR, from `cachekeeper hydrate --print-env`) is the only
link to the prebuild. Mode aot is the one line `cachekeeper.runtime.compile_pipeline(pipe)` instead: the
precompiled functions of the hydrated dir, falling back to torch.compile (its report is in the JSON line).

Prints one JSON line (parsed by tests/pipeline and benchmarks/cold_start.py):
    {"pipeline": ..., "import_s": ..., "load_s": ..., "first_call_s": ..., "process_s": ...,
     "fxgraph_cache_hit": ..., "fxgraph_cache_miss": ..., "dynamo_frames": ..., [aot: "precompiled_calls": ...,
     "fallback_calls": ..., "fallbacks": [...]], [--compare-eager: "max_abs_diff": ...]}

    python examples/serve_pipeline.py examples/models/tiny-flux2-klein --height 64 --width 64 \\
        --prompt "a red fox" --steps 3 --seed 7 --max-sequence-length 16
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

T_START = time.perf_counter()
COUNTERS = {"inductor": ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass"),
            "aot_autograd": ("autograd_cache_hit", "autograd_cache_miss", "autograd_cache_bypass")}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="time the first call of a diffusers pipeline with a compiled transformer")
    ap.add_argument("model", help="local diffusers pipeline folder (save_pretrained layout)")
    ap.add_argument("--component", default="transformer", help="the pipeline attribute to compile")
    ap.add_argument("--mode", default="full", choices=["full", "repeated_blocks", "aot", "none"],
                    help="aot: cachekeeper.runtime.compile_pipeline(pipe) (precompiled functions)")
    ap.add_argument("--prompt", default="a photo of a cat")
    ap.add_argument("--height", type=int, default=64)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--images", type=int, default=1, help="num_images_per_prompt")
    ap.add_argument("--steps", type=int, default=4, help="num_inference_steps")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-sequence-length", type=int, default=0, help="0: the pipeline's default")
    ap.add_argument("--guidance-scale", type=float, help="the pipeline's default when unset")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--cache-dir", help="TORCHINDUCTOR_CACHE_DIR for this process")
    ap.add_argument("--compare-eager", action="store_true",
                    help="also run the pipeline eager (same seed) and report max |image - eager image|")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.cache_dir:  # before torch is imported: Inductor reads it once
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.abspath(args.cache_dir)

    import torch
    from diffusers import DiffusionPipeline
    from torch._dynamo.utils import counters

    t_import = time.perf_counter() - T_START
    t = time.perf_counter()
    pipe = DiffusionPipeline.from_pretrained(args.model, torch_dtype=getattr(torch, args.dtype)).to(args.device)
    pipe.set_progress_bar_config(disable=True)
    load_s = time.perf_counter() - t
    component = getattr(pipe, args.component)
    t = time.perf_counter()
    if args.mode == "full":       # the documented call
        component.compile(fullgraph=True, dynamic=False)
    elif args.mode == "repeated_blocks":
        component.compile_repeated_blocks(fullgraph=True, dynamic=False)
    elif args.mode == "aot":
        from cachekeeper.runtime import compile_pipeline

        served = compile_pipeline(pipe)
    setup_s = time.perf_counter() - t

    def call() -> Any:
        kwargs: dict[str, object] = {"prompt": args.prompt, "height": args.height, "width": args.width,
                                     "num_inference_steps": args.steps, "num_images_per_prompt": args.images,
                                     "generator": torch.Generator().manual_seed(args.seed), "output_type": "pt"}
        if args.max_sequence_length:
            kwargs["max_sequence_length"] = args.max_sequence_length
        if args.guidance_scale is not None:
            kwargs["guidance_scale"] = args.guidance_scale
        out = pipe(**kwargs).images
        if args.device.startswith("cuda"):   # output_type "pt" stays on the device: wait for it
            torch.cuda.synchronize()
        return out

    t = time.perf_counter()
    images = call()
    first_call_s = time.perf_counter() - t
    process_s = time.perf_counter() - T_START
    report: dict[str, object] = {}
    if args.mode == "aot":
        report.update(served.stats())
    if args.compare_eager:  # after the timed call; the class's forward again, same seed
        if args.mode == "aot":
            served.restore()
        elif args.mode != "none":
            sys.exit("serve_pipeline: error: --compare-eager needs --mode aot or none")
        report["max_abs_diff"] = float((images - call()).abs().max())
    print(json.dumps({
        "pipeline": type(pipe).__name__, "images": len(images), "import_s": round(t_import, 3),
        "load_s": round(load_s, 3), "setup_s": round(setup_s, 3), "first_call_s": round(first_call_s, 3),
        "process_s": round(process_s, 3),
        **{name: int(counters[group][name]) for group, names in COUNTERS.items() for name in names},
        "dynamo_frames": int(counters["frames"]["total"]), **report,
    }))


if __name__ == "__main__":
    main()
