"""What a server does with a diffusers pipeline on Inductor, and nothing else: load it, compile the
transformer with the documented call, run `pipe(...)`. No cachekeeper import: the hydrated cache dir
(TORCHINDUCTOR_CACHE_DIR, from `cachekeeper hydrate --print-env`) is the only link to the prebuild.

Prints one JSON line (parsed by tests/pipeline and benchmarks/cold_start.py):
    {"pipeline": ..., "first_call_s": ..., "process_s": ..., "fxgraph_cache_hit": ..., "fxgraph_cache_miss": ...}

    python examples/serve_pipeline.py examples/models/tiny-flux2-klein --height 64 --width 64 \\
        --prompt "a red fox" --steps 3 --seed 7 --max-sequence-length 16
"""

from __future__ import annotations

import argparse
import json
import os
import time

T_START = time.perf_counter()
COUNTERS = {"inductor": ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass"),
            "aot_autograd": ("autograd_cache_hit", "autograd_cache_miss", "autograd_cache_bypass")}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="time the first call of a diffusers pipeline with a compiled transformer")
    ap.add_argument("model", help="local diffusers pipeline folder (save_pretrained layout)")
    ap.add_argument("--component", default="transformer", help="the pipeline attribute to compile")
    ap.add_argument("--mode", default="full", choices=["full", "repeated_blocks", "none"])
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
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.cache_dir:  # before torch is imported: Inductor reads it once
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.abspath(args.cache_dir)

    import torch
    from diffusers import DiffusionPipeline
    from torch._dynamo.utils import counters

    t = time.perf_counter()
    pipe = DiffusionPipeline.from_pretrained(args.model, torch_dtype=getattr(torch, args.dtype)).to(args.device)
    pipe.set_progress_bar_config(disable=True)
    load_s = time.perf_counter() - t
    component = getattr(pipe, args.component)
    if args.mode == "full":       # the documented call
        component.compile(fullgraph=True, dynamic=False)
    elif args.mode == "repeated_blocks":
        component.compile_repeated_blocks(fullgraph=True, dynamic=False)
    kwargs: dict[str, object] = {"prompt": args.prompt, "height": args.height, "width": args.width,
                                 "num_inference_steps": args.steps, "num_images_per_prompt": args.images,
                                 "generator": torch.Generator().manual_seed(args.seed)}
    if args.max_sequence_length:
        kwargs["max_sequence_length"] = args.max_sequence_length
    if args.guidance_scale is not None:
        kwargs["guidance_scale"] = args.guidance_scale
    t = time.perf_counter()
    images = pipe(**kwargs).images
    first_call_s = time.perf_counter() - t
    print(json.dumps({
        "pipeline": type(pipe).__name__, "images": len(images), "load_s": round(load_s, 3),
        "first_call_s": round(first_call_s, 3), "process_s": round(time.perf_counter() - T_START, 3),
        **{name: int(counters[group][name]) for group, names in COUNTERS.items() for name in names},
    }))


if __name__ == "__main__":
    main()
