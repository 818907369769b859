"""Component inputs are captured from a real pipeline call, and the entry key follows exactly what in that
call changes a compiled graph. Eager CPU calls of tiny pipelines only: seconds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cachekeeper.backends.base import ModelRef
from cachekeeper.config import parse_config
from cachekeeper.format.spec import EntrySpec, Shape

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from cachekeeper.backends.pipeline_warmup import call_kwargs, captured_component, load_pipeline  # noqa: E402

SHAPE = Shape(64, 64, 1)


def ref(pipelines: Path, name: str, component: str = "transformer", **kw: Any) -> ModelRef:
    return ModelRef(name, component, path=str(pipelines / name), **kw)


def spec(name: str, shape: Shape = SHAPE, component: str = "transformer") -> EntrySpec:
    return EntrySpec(name, component, "inductor", "full", shape, "float32")


def signature(value: Any) -> Any:
    """What a compiler keys a graph on: shapes and dtypes of tensors, other values as they are."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), str(value.dtype))
    if isinstance(value, dict):
        return {k: signature(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return tuple(signature(v) for v in value)
    return value


def captured(pipelines: Path, name: str, shape: Shape = SHAPE, **kw: Any) -> dict[str, Any]:
    _, inputs = captured_component(ref(pipelines, name, **kw), spec(name, shape), torch.float32)
    return inputs


def test_flux2_klein_transformer_gets_4_axis_ids_and_no_pooled_projections(pipelines: Path) -> None:
    inputs = captured(pipelines, "tiny-flux2-klein", max_sequence_length=16)
    assert "pooled_projections" not in inputs
    assert inputs["img_ids"].shape == (1, (64 // 16) ** 2, 4)    # VAE /8, then 2x2 packing; 4 rope axes
    assert inputs["txt_ids"].shape == (1, 16, 4)                  # padded to max_sequence_length
    assert inputs["encoder_hidden_states"].shape == (1, 16, 48)   # 3 stacked Qwen3 layers of 16


def test_flux1_transformer_gets_the_t5_length_and_clip_pooled_projections(pipelines: Path) -> None:
    inputs = captured(pipelines, "tiny-flux1", max_sequence_length=16)
    assert inputs["encoder_hidden_states"].shape[:2] == (1, 16)
    assert inputs["pooled_projections"].shape == (1, 32)
    assert inputs["guidance"].dtype == torch.float32


def test_sdxl_unet_positional_arguments_are_replayed_by_name(pipelines: Path) -> None:
    inputs = captured(pipelines, "tiny-sdxl", component="unet")
    assert {"sample", "timestep", "encoder_hidden_states", "added_cond_kwargs"} <= set(inputs)
    assert inputs["sample"].shape == (1, 4, 8, 8)


def test_what_does_not_change_a_graph_does_not_change_the_captured_inputs(pipelines: Path) -> None:
    pipe = load_pipeline(ref(pipelines, "tiny-flux1"), torch.float32)
    r, s = ref(pipelines, "tiny-flux1", max_sequence_length=16), spec("tiny-flux1")
    seen: list[Any] = []
    hook = pipe.transformer.register_forward_pre_hook(lambda m, a, kw: seen.append(signature(kw)), with_kwargs=True)
    try:
        pipe(**call_kwargs(pipe, s, r))
        pipe(**call_kwargs(pipe, s, r, prompt="a much longer prompt about a red fox in the snow", steps=3, seed=7))
    finally:
        hook.remove()
    assert len(seen) == 2 + 3 and all(sig == seen[0] for sig in seen)


@pytest.mark.parametrize("change", ["max_sequence_length", "images_per_prompt", "guidance"])
def test_what_changes_a_graph_changes_the_captured_inputs_and_the_key(pipelines: Path, change: str) -> None:
    base = dict(max_sequence_length=16)
    other = {"max_sequence_length": dict(max_sequence_length=24), "images_per_prompt": base,
             "guidance": dict(base, guidance=True)}[change]
    shape = Shape(64, 64, 2) if change in ("images_per_prompt", "guidance") else Shape(64, 64, 1)
    first = signature(captured(pipelines, "tiny-sd3", **base))
    second = signature(captured(pipelines, "tiny-sd3", shape=shape, **other))
    assert first != second
    yaml = ("version: 1\nmodels:\n  - name: m\n    path: /nowhere\n    backends: [neuron]\n    modes: [eager]\n"
            "    shapes: ['64x64x1']\n    max_sequence_length: {n}\n{extra}")
    plain = parse_config(yaml.format(n=16, extra="")).entries()[0].spec
    changed = parse_config(yaml.format(
        n=other.get("max_sequence_length", 16),
        extra={"guidance": "    guidance: true\n"}.get(change, ""))
        .replace("64x64x1", "64x64x2" if change == "images_per_prompt" else "64x64x1")).entries()[0].spec
    assert plain.key != changed.key


def test_prompt_text_steps_and_seed_are_not_config_and_not_in_the_key() -> None:
    yaml = "version: 1\nmodels:\n  - name: m\n    path: /nowhere\n    backends: [neuron]\n    shapes: ['64x64']\n"
    for key in ("prompt", "num_inference_steps", "seed"):
        with pytest.raises(Exception, match=f"unknown key '{key}'"):
            parse_config(yaml + f"    {key}: 1\n")
    (entry,) = parse_config(yaml + "    modes: [eager]\n").entries()
    assert dict(entry.spec.options) == {"warmup": "pipeline", "guidance": "off"}


@pytest.mark.parametrize(("model", "builder"), [("tiny-flux2-klein", "flux2"), ("tiny-flux1", "flux"),
                                                ("tiny-sd3", "sd3")])
def test_the_fallback_builder_for_a_bare_component_matches_what_the_pipeline_passes(
        pipelines: Path, model: str, builder: str) -> None:
    """Without its pipeline a component gets built inputs; `auto` picks the family (FLUX.2 too), and the
    shapes and dtypes agree with the captured call, so the graph is the same one."""
    from cachekeeper.backends.warmup import build_inputs, pick_auto

    shape = Shape(64, 128, 1)
    component, real = captured_component(ref(pipelines, model, max_sequence_length=16), spec(model, shape),
                                         torch.float32)
    assert pick_auto(component) == builder
    built = build_inputs(component, ModelRef(model, "transformer", inputs="auto"), shape, "float32", "cpu",
                         {"text_len": "16" if model != "tiny-sd3" else str(77 + 16)})
    tensors = sorted(k for k, v in real.items() if isinstance(v, torch.Tensor))
    assert signature({k: real[k] for k in tensors}) == signature({k: built.get(k) for k in tensors})
