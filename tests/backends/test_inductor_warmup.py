"""cachekeeper.backends.warmup: inputs a real tiny model accepts, shaped as the diffusers pipelines shape them.

Eager forwards of tiny models only (no compile): seconds, not minutes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from cachekeeper.backends.base import ModelRef
from cachekeeper.errors import BuildFailed
from cachekeeper.format.spec import Shape

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

from cachekeeper.backends.warmup import build_inputs  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SHAPE = Shape(height=64, width=128, batch=2)   # non-square: catches height/width swaps


def _examples() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_tiny_model", REPO / "examples" / "make_tiny_model.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def flux() -> Any:
    torch.manual_seed(0)
    return diffusers.FluxTransformer2DModel(**_examples().TINY_FLUX).eval()


@pytest.fixture(scope="module")
def unet() -> Any:
    torch.manual_seed(0)
    return diffusers.UNet2DConditionModel(**_examples().TINY_UNET).eval()


def ref(inputs: str = "auto") -> ModelRef:
    return ModelRef(name="m", component="c", inputs=inputs)


def forward(model: Any, inputs: dict[str, Any]) -> Any:
    with torch.no_grad():
        return model(**inputs)[0]


def test_flux_inputs_are_packed_latents_with_2d_ids(flux: Any) -> None:
    inputs = build_inputs(flux, ref(), SHAPE, "float32", "cpu")
    tokens = (64 // 16) * (128 // 16)   # VAE /8, then 2x2 packing
    assert inputs["hidden_states"].shape == (2, tokens, 16)
    assert inputs["img_ids"].shape == (tokens, 3)
    assert inputs["encoder_hidden_states"].shape == (2, 512, 32)
    assert inputs["txt_ids"].shape == (512, 3)
    assert inputs["img_ids"][:, 2].max().item() == 128 // 16 - 1   # width runs along the last id axis
    assert forward(flux, inputs).shape == inputs["hidden_states"].shape


def test_flux_guidance_stays_float32_when_the_model_is_bfloat16(flux: Any) -> None:
    inputs = build_inputs(flux, ref("flux"), SHAPE, "bfloat16", "cpu")
    assert inputs["hidden_states"].dtype == inputs["timestep"].dtype == torch.bfloat16
    assert inputs["guidance"].dtype == torch.float32


def test_flux_without_guidance_embeds_gets_no_guidance() -> None:
    torch.manual_seed(0)
    model = diffusers.FluxTransformer2DModel(**{**_examples().TINY_FLUX, "guidance_embeds": False}).eval()
    inputs = build_inputs(model, ref(), SHAPE, "float32", "cpu", {"text_len": "7"})
    assert "guidance" not in inputs
    assert inputs["encoder_hidden_states"].shape[1] == 7
    forward(model, inputs)


def test_unet_inputs_are_latents_at_one_eighth(unet: Any) -> None:
    inputs = build_inputs(unet, ref(), SHAPE, "float32", "cpu")
    assert inputs["sample"].shape == (2, 4, 8, 16)
    assert inputs["encoder_hidden_states"].shape == (2, 77, 32)
    assert inputs["timestep"].dtype == torch.int64 and inputs["timestep"].dim() == 0
    assert forward(unet, inputs).shape == inputs["sample"].shape


def test_sd3_inputs_concatenate_clip_and_t5_lengths() -> None:
    torch.manual_seed(0)
    model = diffusers.SD3Transformer2DModel(
        sample_size=8, patch_size=2, in_channels=4, out_channels=4, num_layers=1, attention_head_dim=8,
        num_attention_heads=2, joint_attention_dim=32, caption_projection_dim=16, pooled_projection_dim=32,
        pos_embed_max_size=32).eval()
    inputs = build_inputs(model, ref(), SHAPE, "float32", "cpu")
    assert inputs["hidden_states"].shape == (2, 4, 8, 16)
    assert inputs["encoder_hidden_states"].shape == (2, 333, 32)
    assert forward(model, inputs).shape == inputs["hidden_states"].shape


def test_inputs_do_not_depend_on_the_global_rng(unet: Any) -> None:
    torch.manual_seed(1)
    first = build_inputs(unet, ref(), SHAPE, "float32", "cpu")
    torch.manual_seed(2)
    second = build_inputs(unet, ref(), SHAPE, "float32", "cpu")
    assert torch.equal(first["sample"], second["sample"])
    assert torch.equal(first["encoder_hidden_states"], second["encoder_hidden_states"])


def custom_inputs(model: Any, model_ref: ModelRef, shape: Shape, dtype: Any, device: str,
                  options: dict[str, str]) -> dict[str, Any]:
    return {"x": torch.zeros(shape.batch, shape.height), "seen": (model_ref.name, str(dtype), device)}


def test_module_function_builders_are_called_with_the_entry() -> None:
    inputs = build_inputs(object(), ref(f"{__name__}:custom_inputs"), SHAPE, "float16", "cpu")
    assert inputs["x"].shape == (2, 64)
    assert inputs["seen"] == ("m", "float16", "cpu")


@pytest.mark.parametrize("inputs", ["auto", "nosuch", "nosuch.module:fn", f"{__name__}:nosuch"])
def test_unknown_builders_fail_with_a_hint(inputs: str) -> None:
    with pytest.raises(BuildFailed) as exc:
        build_inputs(torch.nn.Linear(2, 2), ref(inputs), SHAPE, "float32", "cpu")
    assert exc.value.hint
