"""Warm up what the server runs: the whole diffusers pipeline, or one component fed its captured inputs.

Shared by every backend's build subprocess. A server loads the pipeline, places it (device, CPU offload,
tensor parallel), compiles a component and calls `pipe(prompt=..., height=..., width=...)`. In eager modes
every op of the text encoders, transformer, VAE decode and scheduler compiles on its first run, so only
that same call leaves nothing for boot. For a component warm-up, one pipeline call on CPU records the
component's real arguments (a forward pre-hook) and the build replays them: the compiled graph is the
serving graph by construction, for any family, with no hand-written input builder.

What changes a compiled graph is taken from the entry (height, width, images per prompt, guidance,
`max_sequence_length`, offload); what does not (prompt text, step count, seed) is fixed here and left out
of the key. torch, diffusers and transformers are imported inside functions only.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import BuildFailed
from ..format.spec import EntrySpec, ModelRef

WARMUP_PROMPT = "warmup"
WARMUP_STEPS = 2          # a second step runs the scheduler's step path with a non-initial sigma
SEED = 0
MODEL_INDEX = "model_index.json"


def warmup_kind(spec: EntrySpec) -> str:
    """The entry's warm-up, as its key says: the config puts `warmup=pipeline` there (for eager modes by
    default, spec.default_warmup); a key without it (an entry of an earlier release) is a component warm-up."""
    return "pipeline" if dict(spec.options).get("warmup") == "pipeline" else "component"


def has_pipeline(ref: ModelRef) -> bool:
    """A hub model is a pipeline repo; a local folder is one when it has diffusers' model_index.json."""
    return bool(ref.hub) or bool(ref.path and (Path(ref.path) / MODEL_INDEX).is_file())


def pipeline_class_name(ref: ModelRef) -> str | None:
    """`_class_name` of a local pipeline folder (None for hub models: known only after the download)."""
    if not ref.path:
        return None
    try:
        name = json.loads((Path(ref.path) / MODEL_INDEX).read_text())["_class_name"]
    except (OSError, ValueError, KeyError) as exc:
        raise BuildFailed(f"{ref.name}: {ref.path} is not a diffusers pipeline folder ({exc})",
                          "point path at a save_pretrained pipeline folder or set warmup: component") from None
    return str(name)


def require_pipeline_libraries(ref: ModelRef) -> None:
    """The pipeline class must exist in this diffusers, and its text encoders need transformers."""
    import diffusers

    name = pipeline_class_name(ref)
    if name is not None and not hasattr(diffusers, name):
        raise BuildFailed(f"{ref.name}: diffusers {diffusers.__version__} has no pipeline class {name}",
                          f"upgrade diffusers (pip install -U diffusers) to a release that ships {name}")
    if importlib.util.find_spec("transformers") is None:
        raise BuildFailed(f"{ref.name}: transformers is not installed; the pipeline's text encoders need it",
                          "pip install 'cachekeeper[build]' (or pip install transformers)")


def load_pipeline(ref: ModelRef, torch_dtype: Any) -> Any:
    """`DiffusionPipeline.from_pretrained` as the server calls it: a local path, or hub id plus revision."""
    from diffusers import DiffusionPipeline

    require_pipeline_libraries(ref)
    kwargs: dict[str, Any] = {"torch_dtype": torch_dtype}
    if ref.path:
        source = ref.path
    elif ref.hub:
        if not ref.revision:
            raise BuildFailed(f"{ref.name}: hub model {ref.hub} has no revision",
                              "set revision: to a commit sha or tag so the keys pin the weights")
        source, kwargs["revision"] = ref.hub, ref.revision
    else:
        raise BuildFailed(f"{ref.name}: the model has neither a path nor a hub id")
    quiet_loading()
    loader: Any = DiffusionPipeline  # diffusers is untyped
    try:
        pipe = loader.from_pretrained(source, **kwargs)
    except (OSError, ValueError) as exc:
        raise BuildFailed(f"{ref.name}: cannot load the pipeline from {source}: {exc}") from None
    pipe.set_progress_bar_config(disable=True)
    return pipe


def quiet_loading() -> None:
    """No loading progress bars in build logs: the worker shows their tail, where a one-line error belongs."""
    from diffusers.utils import logging as diffusers_logging

    diffusers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        from transformers.utils import logging as transformers_logging
    except ImportError:
        return
    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]


def component_of(pipe: Any, ref: ModelRef) -> Any:
    model = getattr(pipe, ref.component, None)
    if model is None or not hasattr(model, "forward"):
        have = sorted(k for k, v in pipe.components.items() if hasattr(v, "forward"))
        raise BuildFailed(f"{ref.name}: {type(pipe).__name__} has no component {ref.component!r}",
                          f"set component: to one of {', '.join(have)}")
    return model


def size_multiple(pipe: Any, component: Any) -> int:
    """Height and width must be multiples of the VAE's downsampling times the component's patch packing.
    The pipeline's image processor knows the first (Flux packs 2x2 into it); a patchifying transformer
    (SD3) adds its patch size."""
    processor = getattr(pipe, "image_processor", None)
    vae_multiple = int(getattr(getattr(processor, "config", None), "vae_scale_factor", 0)
                       or getattr(pipe, "vae_scale_factor", 8))
    return vae_multiple * int(getattr(component.config, "patch_size", 1) or 1)


def check_size(ref: ModelRef, spec: EntrySpec, pipe: Any, component: Any) -> None:
    multiple = size_multiple(pipe, component)
    shape = spec.shape
    if shape.height % multiple or shape.width % multiple:
        def fit(n: int) -> int:
            return max(multiple, n // multiple * multiple)

        raise BuildFailed(f"{ref.name}: {shape.height}x{shape.width} does not fit {type(pipe).__name__} "
                          f"(height and width must be multiples of {multiple})",
                          f"use a shape such as {fit(shape.height)}x{fit(shape.width)}")


def images_per_prompt(spec: EntrySpec, ref: ModelRef) -> int:
    """The entry's batch is the compiled batch: the config doubled it under classifier-free guidance."""
    return spec.shape.batch // 2 if ref.guidance and spec.shape.batch % 2 == 0 else spec.shape.batch


def call_kwargs(pipe: Any, spec: EntrySpec, ref: ModelRef, *, prompt: str = WARMUP_PROMPT,
                steps: int = WARMUP_STEPS, seed: int = SEED) -> dict[str, Any]:
    """The pipeline call at the entry's shape. Only arguments the pipeline accepts are passed, so one
    function serves every family (FLUX.1's CFG is `true_cfg_scale` with a negative prompt)."""
    import torch

    params = inspect.signature(pipe.__call__).parameters
    kwargs: dict[str, Any] = {"prompt": prompt, "height": spec.shape.height, "width": spec.shape.width,
                              "num_inference_steps": steps, "num_images_per_prompt": images_per_prompt(spec, ref),
                              "generator": torch.Generator().manual_seed(seed)}
    if ref.max_sequence_length and "max_sequence_length" in params:
        kwargs["max_sequence_length"] = ref.max_sequence_length
    if "true_cfg_scale" in params:
        if ref.guidance:
            kwargs.update(true_cfg_scale=4.0, negative_prompt="")
    elif "guidance_scale" in params and not ref.guidance:
        kwargs["guidance_scale"] = 1.0  # CFG is on above 1: off means one branch per step
    return {k: v for k, v in kwargs.items() if k in params}


def place(pipe: Any, ref: ModelRef, device: str) -> None:
    """On the device, or with diffusers' CPU offload onto it (what the server configures)."""
    if ref.offload == "model":
        pipe.enable_model_cpu_offload(device=device)
    elif ref.offload == "sequential":
        pipe.enable_sequential_cpu_offload(device=device)
    else:
        pipe.to(device)


class _Captured(Exception):
    """Stops the pipeline once the component's first call is recorded."""


def capture_inputs(pipe: Any, component: Any, kwargs: Mapping[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The component's positional and keyword arguments on the pipeline's first call of it."""
    import torch

    seen: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def hook(module: Any, args: tuple[Any, ...], kw: dict[str, Any]) -> None:
        seen.append((args, dict(kw)))
        raise _Captured

    handle = component.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with torch.no_grad():
            pipe(**kwargs)
    except _Captured:
        pass
    finally:
        handle.remove()
    if not seen:
        raise BuildFailed(f"{type(pipe).__name__} never called its {type(component).__name__}",
                          "warm up a component the pipeline runs, or set warmup: pipeline")
    return seen[0]


def to_device(value: Any, device: str) -> Any:
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda v: v.to(device) if isinstance(v, torch.Tensor) else v, value)


def as_keywords(component: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Positional arguments by name (SDXL calls its UNet positionally): one keyword dict to replay."""
    bound = inspect.signature(component.forward).bind_partial(*args, **kwargs)
    return dict(bound.arguments)


def captured_component(ref: ModelRef, spec: EntrySpec, torch_dtype: Any) -> tuple[Any, dict[str, Any]]:
    """(component on CPU, its captured keyword arguments): one pipeline call on CPU, stopped there."""
    pipe = load_pipeline(ref, torch_dtype)
    component = component_of(pipe, ref)
    check_size(ref, spec, pipe, component)
    args, kwargs = capture_inputs(pipe, component, call_kwargs(pipe, spec, ref))
    return component.eval().requires_grad_(False), as_keywords(component, args, kwargs)

