"""Run by tests/pipeline/test_aot_pipeline.py in one fresh process: cachekeeper.runtime.compile_pipeline on a
hydrated aot dir and on damaged copies of it, one JSON line per scenario. Not a test module.

    python aot_pipeline_scenarios.py MODEL_DIR HYDRATED_DIR OTHER_DIFFUSERS_DIR

The process's TORCHINDUCTOR_CACHE_DIR is a copy of the hydrated dir: the fallback compiles read (and write)
that one. Only the `diffusers` scenario runs a fallback compile (the prebuilt call, so a warm load); the
others ask the dispatcher (`precompiled_for`, nothing compiled) or run precompiled or eager.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch
from torch._dynamo.utils import counters

from cachekeeper.backends.pipeline_warmup import as_keywords, capture_inputs
from cachekeeper.runtime import compile_pipeline

STEPS = 2


def load(model_dir: str) -> Any:
    from diffusers import DiffusionPipeline

    pipe = DiffusionPipeline.from_pretrained(model_dir, torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def call_kwargs(height: int = 64, seed: int = 3) -> dict[str, Any]:
    return {"prompt": "a scenario prompt", "height": height, "width": 64, "num_inference_steps": STEPS,
            "max_sequence_length": 16, "guidance_scale": 1.0, "output_type": "pt",
            "generator": torch.Generator().manual_seed(seed)}


def images(pipe: Any) -> Any:
    return pipe(**call_kwargs()).images


def captured(pipe: Any, height: int = 64) -> dict[str, Any]:
    args, kwargs = capture_inputs(pipe, pipe.transformer, call_kwargs(height))
    return as_keywords(pipe.transformer, args, kwargs)


def fx() -> dict[str, int]:
    return {k: int(counters["inductor"][k]) for k in ("fxgraph_cache_hit", "fxgraph_cache_miss")}


class LoraLinear(torch.nn.Module):
    """What PEFT's injection makes of a target layer: the base layer wrapped, with a low-rank update."""

    def __init__(self, base: torch.nn.Linear) -> None:
        super().__init__()
        self.base_layer = base
        self.lora_A = torch.nn.Linear(base.in_features, 2, bias=False)
        self.lora_B = torch.nn.Linear(2, base.out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base_layer(x) + self.lora_B(self.lora_A(x))


def emit(name: str, **out: Any) -> None:
    print(json.dumps({"scenario": name, **out}), flush=True)


def main(model_dir: str, hydrated: str, other_diffusers: str) -> None:
    pipe = load(model_dir)
    transformer, config, dtype, device = pipe.transformer, pipe.transformer.config, pipe.dtype, pipe.device
    hook_calls: list[int] = []
    transformer.register_forward_pre_hook(lambda module, args: hook_calls.append(1))
    served = compile_pipeline(pipe, hydrated)
    got = images(pipe)
    stats = served.stats()
    served.restore()
    want = images(pipe)
    emit("served", served=stats["served"], precompiled_calls=stats["precompiled_calls"],
         fallback_calls=stats["fallback_calls"], hook_calls=len(hook_calls),
         max_abs_diff=float((got - want).abs().max()),
         same_objects=pipe.transformer is transformer and pipe.components["transformer"] is transformer,
         same_attributes=pipe.transformer.config is config and pipe.dtype == dtype and pipe.device == device,
         forward_restored="forward" not in transformer.__dict__)

    served = compile_pipeline(pipe, hydrated)
    again = compile_pipeline(pipe, hydrated)
    emit("twice", same=again is served, notes=again.notes, installed=sorted(again.components))

    # A LoRA fused and unloaded: new weight values, same module tree. The function reads the weights.
    with torch.no_grad():
        for p in transformer.transformer_blocks[0].attn.to_q.parameters():
            p.add_(0.05)
    got = images(pipe)
    precompiled = served.stats()["precompiled_calls"]
    served.restore()
    want = images(pipe)
    emit("fused", precompiled_calls=precompiled, max_abs_diff=float((got - want).abs().max()))

    # A LoRA loaded (the layer wrapped, as PEFT does), after compile_pipeline; then unloaded again.
    inputs, taller = captured(pipe), captured(pipe, height=96)   # the class's forward names them
    served = compile_pipeline(pipe, hydrated)
    before = served.components["transformer"].precompiled_for(**inputs)
    attn = transformer.transformer_blocks[0].attn
    base = attn.to_q
    attn.to_q = LoraLinear(base)
    loaded = served.components["transformer"].precompiled_for(**inputs)
    attn.to_q = base
    unloaded = served.components["transformer"].precompiled_for(**inputs)
    emit("lora", before=before, loaded=loaded, unloaded=unloaded, fallbacks=served.stats()["fallbacks"])

    emit("height", precompiled=served.components["transformer"].precompiled_for(**taller),
         fallbacks=served.stats()["fallbacks"])
    served.restore()

    # An entry hydrated for another diffusers: the prebuilt call falls back, a warm load of its graph.
    other = load(model_dir)
    served = compile_pipeline(other, other_diffusers)
    before_fx = fx()
    got = images(other)
    after_fx = fx()
    stats = served.stats()
    served.restore()
    want = images(other)
    emit("diffusers", precompiled_calls=stats["precompiled_calls"], fallback_calls=stats["fallback_calls"],
         fallbacks=stats["fallbacks"], max_abs_diff=float((got - want).abs().max()),
         fxgraph_cache_hit=after_fx["fxgraph_cache_hit"] - before_fx["fxgraph_cache_hit"],
         fxgraph_cache_miss=after_fx["fxgraph_cache_miss"] - before_fx["fxgraph_cache_miss"])

    # CPU offload hooks (diffusers' group offloading; running it needs accelerate, not installed here):
    # compile_pipeline leaves the component as configured, hooks and all, and says so once.
    offloaded = load(model_dir)
    offloaded.transformer.enable_group_offload(onload_device=torch.device("cpu"), offload_device=torch.device("cpu"),
                                               offload_type="leaf_level")
    hooked = {name: type(m.forward).__name__ for name, m in offloaded.transformer.named_modules()
              if "forward" in m.__dict__}
    served = compile_pipeline(offloaded, hydrated)
    still = {name: type(m.forward).__name__ for name, m in offloaded.transformer.named_modules()
             if "forward" in m.__dict__}
    emit("offload", installed=sorted(served.components), notes=served.notes,
         hooks_kept=bool(hooked) and still == hooked, top_forward_replaced="forward" in offloaded.transformer.__dict__)

if __name__ == "__main__":
    main(*sys.argv[1:4])
