"""Warm-up inputs: tensors shaped exactly as a serving pipeline feeds a component, so the graph compiled
at prebuild time is the graph the server asks for (same shapes, dtypes and argument set, hence same key).

Shared by every backend's build subprocess (inductor, neuron, tpu). torch is imported inside functions
only, so importing this module stays cheap.

A FALLBACK for a component shipped without its pipeline: when the model folder is a pipeline, the build
captures the component's real arguments from one pipeline call instead (cachekeeper/backends/pipeline_warmup.py).

`ModelRef.inputs` picks the builder: "flux", "flux2", "sd3", "unet", "auto" (by the model's class name) or
"module:function" for a custom one called as `function(model, model_ref, shape, dtype, device, options)`.
`shape.batch` is the batch the component sees: the config already doubles it under classifier-free
guidance. `options["text_len"]` overrides the prompt length the pipeline pads to.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import BuildFailed
from ..format.spec import ModelRef, Shape

VAE_SCALE_FACTOR = 8          # SD/SDXL/Flux VAEs downsample by 8
FLUX_TEXT_LEN = 512           # FluxPipeline's default max_sequence_length (T5 prompt padded to it)
FLUX2_TEXT_LEN = 512          # Flux2(Klein)Pipeline's default max_sequence_length (Qwen3/Mistral prompt)
CLIP_TEXT_LEN = 77            # CLIP's fixed context length (SD UNets)
SD3_TEXT_LEN = 77 + 256       # SD3 concatenates CLIP (77) and T5 (max_sequence_length 256) embeddings
SEED = 0

Builder = Callable[..., dict[str, Any]]


def _torch_dtype(dtype: Any) -> Any:
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    resolved = getattr(torch, str(dtype), None)
    if not isinstance(resolved, torch.dtype):
        raise BuildFailed(f"unknown dtype {dtype!r}", "use a torch dtype name such as float32 or bfloat16")
    return resolved


def _randn(*size: int, dtype: Any, device: str) -> Any:
    import torch

    # A fixed-seed CPU generator: identical inputs on every host, whatever the device's RNG.
    g = torch.Generator().manual_seed(SEED)
    return torch.randn(*size, generator=g, dtype=torch.float32).to(device=device, dtype=dtype)


def _prelude(model: Any, dtype: Any, options: Mapping[str, str] | None, text_len: int) -> tuple[Any, Any, int]:
    """What every builder starts from: the torch dtype, the model's config, and the prompt length the
    pipeline pads to (`options["text_len"]`, else the family's default)."""
    return _torch_dtype(dtype), model.config, int((options or {}).get("text_len", text_len))


def latent_size(shape: Shape) -> tuple[int, int]:
    """Latent height and width for an image size (the VAE's 8x downsampling)."""
    return shape.height // VAE_SCALE_FACTOR, shape.width // VAE_SCALE_FACTOR


def flux_inputs(model: Any, model_ref: ModelRef, shape: Shape, dtype: Any, device: str,
                options: Mapping[str, str] | None = None) -> dict[str, Any]:
    """FluxTransformer2DModel inputs as FluxPipeline builds them (2x2-packed latents, 2-D ids)."""
    import torch

    dt, cfg, text_len = _prelude(model, dtype, options, FLUX_TEXT_LEN)
    # FluxPipeline: latent side = 2 * (side // (vae_scale * 2)), then packed into (side/2)^2 tokens.
    h, w = shape.height // (VAE_SCALE_FACTOR * 2), shape.width // (VAE_SCALE_FACTOR * 2)
    img_ids = torch.zeros(h, w, 3)
    img_ids[..., 1] += torch.arange(h)[:, None]
    img_ids[..., 2] += torch.arange(w)[None, :]
    b = shape.batch
    inputs: dict[str, Any] = {
        "hidden_states": _randn(b, h * w, cfg.in_channels, dtype=dt, device=device),
        "encoder_hidden_states": _randn(b, text_len, cfg.joint_attention_dim, dtype=dt, device=device),
        "pooled_projections": _randn(b, cfg.pooled_projection_dim, dtype=dt, device=device),
        # The pipeline passes t/1000 in the latents' dtype.
        "timestep": torch.full((b,), 0.5, dtype=dt, device=device),
        "img_ids": img_ids.reshape(h * w, 3).to(device=device, dtype=dt),
        "txt_ids": torch.zeros(text_len, 3, device=device, dtype=dt),
        "return_dict": False,
    }
    if getattr(cfg, "guidance_embeds", False):
        # The pipeline builds guidance in float32 whatever the model dtype.
        inputs["guidance"] = torch.full((b,), 3.5, dtype=torch.float32, device=device)
    return inputs


def flux2_inputs(model: Any, model_ref: ModelRef, shape: Shape, dtype: Any, device: str,
                 options: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Flux2Transformer2DModel inputs as Flux2KleinPipeline builds them: no pooled projections, 4-axis
    (t, h, w, l) int64 position ids per batch row, text features of 3 stacked encoder layers."""
    import torch

    dt, cfg, text_len = _prelude(model, dtype, options, FLUX2_TEXT_LEN)
    h, w = shape.height // (VAE_SCALE_FACTOR * 2), shape.width // (VAE_SCALE_FACTOR * 2)
    b = shape.batch
    zero = torch.arange(1)
    img_ids = torch.cartesian_prod(zero, torch.arange(h), torch.arange(w), zero)
    txt_ids = torch.cartesian_prod(zero, zero, zero, torch.arange(text_len))
    inputs: dict[str, Any] = {
        "hidden_states": _randn(b, h * w, cfg.in_channels, dtype=dt, device=device),
        "encoder_hidden_states": _randn(b, text_len, cfg.joint_attention_dim, dtype=dt, device=device),
        "timestep": torch.full((b,), 1.0, dtype=dt, device=device),
        "img_ids": img_ids.expand(b, -1, -1).contiguous().to(device),
        "txt_ids": txt_ids.expand(b, -1, -1).contiguous().to(device),
        # Klein passes guidance=None; guidance-distilled FLUX.2 [dev] passes a float32 scale.
        "guidance": torch.full((b,), 4.0, dtype=torch.float32, device=device) if cfg.guidance_embeds else None,
        "joint_attention_kwargs": None,
        "return_dict": False,
    }
    return inputs


def unet_inputs(model: Any, model_ref: ModelRef, shape: Shape, dtype: Any, device: str,
                options: Mapping[str, str] | None = None) -> dict[str, Any]:
    """UNet2DConditionModel inputs as StableDiffusionPipeline builds them."""
    import torch

    dt, cfg, text_len = _prelude(model, dtype, options, CLIP_TEXT_LEN)
    h, w = latent_size(shape)
    return {
        "sample": _randn(shape.batch, cfg.in_channels, h, w, dtype=dt, device=device),
        # Scheduler timesteps are 0-d int64 tensors.
        "timestep": torch.tensor(500, dtype=torch.int64, device=device),
        "encoder_hidden_states": _randn(shape.batch, text_len, cfg.cross_attention_dim, dtype=dt, device=device),
        "return_dict": False,
    }


def sd3_inputs(model: Any, model_ref: ModelRef, shape: Shape, dtype: Any, device: str,
               options: Mapping[str, str] | None = None) -> dict[str, Any]:
    """SD3Transformer2DModel inputs as StableDiffusion3Pipeline builds them (CLIP 77 + T5 256 tokens)."""
    import torch

    dt, cfg, text_len = _prelude(model, dtype, options, SD3_TEXT_LEN)
    h, w = latent_size(shape)
    b = shape.batch
    return {
        "hidden_states": _randn(b, cfg.in_channels, h, w, dtype=dt, device=device),
        "encoder_hidden_states": _randn(b, text_len, cfg.joint_attention_dim, dtype=dt, device=device),
        "pooled_projections": _randn(b, cfg.pooled_projection_dim, dtype=dt, device=device),
        # FlowMatch scheduler timesteps are float32, expanded to the batch without a cast.
        "timestep": torch.full((b,), 500.0, dtype=torch.float32, device=device),
        "return_dict": False,
    }


BUILDERS: dict[str, Builder] = {"flux": flux_inputs, "flux2": flux2_inputs, "sd3": sd3_inputs, "unet": unet_inputs}


def pick_auto(model: Any) -> str:
    """The builder name for a model, from its class name."""
    name = type(model).__name__
    if name.startswith("Flux2Transformer"):
        return "flux2"
    if "Flux" in name and "Transformer" in name:
        return "flux"
    if name.startswith("SD3Transformer"):
        return "sd3"
    if name.startswith("UNet2DCondition"):
        return "unet"
    raise BuildFailed(f"no warm-up input builder for {name}",
                      "set the model's `inputs:` to flux, flux2, sd3, unet or module:function")


def resolve_builder(kind: str, model: Any) -> Builder:
    if kind == "auto":
        kind = pick_auto(model)
    if kind in BUILDERS:
        return BUILDERS[kind]
    module, sep, func = kind.partition(":")
    if not sep or not module or not func:
        raise BuildFailed(f"unknown inputs builder {kind!r}", "use auto, flux, flux2, sd3, unet or module:function")
    try:
        builder: Builder = getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as exc:
        raise BuildFailed(f"cannot load inputs builder {kind!r}: {exc}",
                          "set `inputs:` to module:function naming an importable module and its function") from None
    return builder


def build_inputs(model: Any, model_ref: ModelRef, shape: Shape, dtype: Any, device: str,
                 options: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Keyword arguments for one forward call of `model` at `shape` (image height/width, compiled batch)."""
    builder = resolve_builder(model_ref.inputs, model)
    inputs = builder(model, model_ref, shape, dtype, device, options or {})
    if not isinstance(inputs, dict):
        raise BuildFailed(f"inputs builder {model_ref.inputs!r} returned {type(inputs).__name__}, not a dict")
    return inputs
