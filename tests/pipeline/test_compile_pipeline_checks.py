"""compile_pipeline's checks without a compile: which records a component gets, the module-tree tripwire,
offload detection, the lines it prints when it serves nothing, the record format and the aot key of a
pipeline warm-up. A tiny torch module or a tiny pipeline loaded from disk: seconds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cachekeeper.backends.inductor import aot
from cachekeeper.config import parse_config
from cachekeeper.errors import BuildFailed
from cachekeeper.runtime.component import Record, describe

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from cachekeeper.runtime.pipeline import (  # noqa: E402
    ComponentForward,
    compile_pipeline,
    offload_hooks,
    records_for,
)


class Tiny(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())

    def forward(self, x: Any, scale: float = 1.0) -> Any:
        return self.inner(x) * scale


def meta(model: Any, **kw: Any) -> aot.AotMeta:
    fields: dict[str, Any] = {
        "entry": "e1", "label": "m/transformer", "fingerprint": {}, "options": {},
        "model_class": aot.qualname(type(model)), "config_sha256": aot.config_digest(model), "forward": "f",
        "inputs": {}, "sources": (), "files": {}, "versions": {}, "component": "transformer",
        "structure_sha256": aot.structure_digest(model), **kw}
    return aot.AotMeta(**fields)


# --- which records a pipeline attribute gets -----------------------------------------------------------


def test_records_name_their_pipeline_attribute_and_format_1_records_match_by_class(tmp_path: Path) -> None:
    model = Tiny()
    mine = Record(tmp_path, meta(model))
    other_attribute = Record(tmp_path, meta(model, component="transformer_2"))
    v1_same_class = Record(tmp_path, meta(model, component=""))
    v1_other_class = Record(tmp_path, meta(model, component="", model_class="x.Other"))
    unreadable = Record(tmp_path, None, "unreadable record")
    got = records_for([mine, other_attribute, v1_same_class, v1_other_class, unreadable], "transformer", model)
    assert got == [mine, v1_same_class]


def test_a_format_1_record_reads_with_defaults_and_a_format_2_record_round_trips() -> None:
    model = Tiny()
    v2 = meta(model, warmup="pipeline")
    assert aot.AotMeta.from_json(v2.to_json()) == v2
    v1 = {k: v for k, v in json.loads(v2.to_json()).items()
          if k not in ("component", "structure_sha256", "warmup")} | {"v": 1}
    old = aot.AotMeta.from_json(json.dumps(v1).encode())
    assert (old.component, old.structure_sha256, old.warmup) == ("", "", "component")


# --- what the checks see ---------------------------------------------------------------------------------


def test_the_structure_digest_sees_a_wrapped_layer_and_a_dtype_not_new_weight_values() -> None:
    model = Tiny()
    before = aot.structure_digest(model)
    with torch.no_grad():
        model.inner[0].weight.add_(1.0)   # a LoRA fused into the weights
    assert aot.structure_digest(model) == before
    model.inner[0] = torch.nn.Sequential(model.inner[0])   # the layer wrapped, as PEFT injects
    assert aot.structure_digest(model) != before
    assert aot.structure_digest(Tiny().to(torch.float64)) != aot.structure_digest(Tiny())


def test_the_config_digest_ignores_where_the_model_was_loaded_from() -> None:
    a, b = Tiny(), Tiny()
    a.config = {"in_channels": 4, "_name_or_path": "/build/models/x", "_diffusers_version": "0.42.1"}
    b.config = {"in_channels": 4, "_name_or_path": "/srv/models/x", "_diffusers_version": "0.41.0"}
    assert aot.config_digest(a) == aot.config_digest(b)
    assert aot.config_digest(a, private=True) != aot.config_digest(b, private=True), "format 1 records held them"
    b.config = {"in_channels": 8}
    assert aot.config_digest(a) != aot.config_digest(b)


def test_a_submodule_replaced_after_install_trips_the_check_of_every_signature(tmp_path: Path) -> None:
    model = Tiny()
    x = torch.ones(1, 4)
    record = Record(tmp_path, meta(model, inputs=aot.call_spec({"x": x, "scale": 1.0})))
    served = ComponentForward("transformer", model, tmp_path, [record])
    served.precompiled_for(x=x, scale=1.0)
    assert not any("module tree" in r for r in served.stats.fallbacks) and not served.tree_changed
    model.inner[0] = torch.nn.Sequential(model.inner[0])   # torch's global registration hook fires
    assert served.tree_changed
    assert served.precompiled_for(x=x, scale=1.0) is False
    assert any("the module tree differs from the prebuilt one" in r for r in served.stats.fallbacks)
    assert not served.tree_changed
    model.inner.extra = torch.nn.Parameter(torch.ones(1))  # a new submodule's registrations are watched too
    assert served.tree_changed


def test_arguments_by_position_are_matched_by_name(tmp_path: Path) -> None:
    model = Tiny()
    served = ComponentForward("unet", model, tmp_path, [Record(tmp_path, meta(model))])
    x = torch.ones(1, 4)
    assert served._by_name((x, 2.0), {}) == {"x": x, "scale": 2.0}
    assert served._by_name((x,), {"scale": 3.0}) == {"x": x, "scale": 3.0}
    with pytest.raises(TypeError):
        served._by_name((x, 2.0, 5), {})


def test_offload_hooks_of_accelerate_and_diffusers_are_found_on_any_submodule() -> None:
    model = Tiny()
    assert offload_hooks(model) == ""
    model.inner[0]._hf_hook = object()    # what accelerate's add_hook_to_module leaves
    assert offload_hooks(model).startswith("accelerate offload hooks on inner.0 ")
    other = Tiny()
    other.inner._diffusers_hook = type("Registry", (), {"hooks": {"group_offloading": object()}})()
    assert offload_hooks(other) == "diffusers hooks on inner (group_offloading)"


def test_dict_and_sequence_arguments_are_matched_item_by_item_and_other_objects_refused() -> None:
    spec = aot.call_spec({"joint_attention_kwargs": {}, "ids": (torch.ones(2), 3), "cb": object()})
    assert spec["joint_attention_kwargs"] == {"dict": {}}
    assert spec["ids"]["sequence"][1] == {"constant": 3, "type": "int"}
    assert describe({"a": spec["joint_attention_kwargs"], "b": spec["ids"]}) == "a={} b=[0=2:float32@cpu 1=3]"
    with pytest.raises(BuildFailed, match="aot mode takes tensor and constant arguments only; cb is not"):
        aot.check_inputs(spec, "m/transformer")
    with pytest.raises(BuildFailed, match="nested is not"):
        aot.check_inputs(aot.call_spec({"nested": {"k": [object()]}}), "m/transformer")


def test_an_output_that_differs_from_eager_fails_the_prebuild_in_one_line() -> None:
    want = torch.ones(2, 2)
    assert aot.check_matches(want + 1e-5, want, "float32", "m: the fallback compile") == pytest.approx(1e-5, rel=1e-2)
    with pytest.raises(BuildFailed) as caught:
        aot.check_matches(want + 0.5, want, "float32", "m: the precompiled function")
    assert str(caught.value.message) == "m: the precompiled function differs from eager by 0.5 (limit 0.001)"
    assert "\n" not in caught.value.message and caught.value.hint


def test_a_pipeline_aot_key_carries_the_transformers_version_and_a_component_one_does_not(tmp_path: Path) -> None:
    text = ("version: 1\ndefaults: {backends: [inductor], modes: [aot], shapes: ['64x64']}\nmodels:\n"
            "  - {name: p, path: /m, warmup: pipeline}\n  - {name: c, path: /m, component: transformer}\n")
    options = {e.spec.model: dict(e.spec.options) for e in parse_config(text, "t.yaml", tmp_path).entries()}
    assert options["p"][aot.KEY_TRANSFORMERS] == aot.installed_version("transformers")
    assert options["p"][aot.KEY_DIFFUSERS] == options["c"][aot.KEY_DIFFUSERS]
    assert aot.KEY_TRANSFORMERS not in options["c"], "component warm-up keys are unchanged"


# --- strict=True: the fallback raises instead of compiling -------------------------------------------------


class TinyPipe:
    """What compile_pipeline reads of a pipeline: its components."""

    def __init__(self, model: Any) -> None:
        self.transformer = model
        self.components = {"transformer": model}


def test_strict_true_refuses_a_call_no_precompiled_function_serves_before_its_fallback_compiles(
        tmp_path: Path) -> None:
    from cachekeeper.errors import CompileRefused
    from cachekeeper.runtime import compile_ledger

    model = Tiny()
    record = tmp_path / aot.AOT_DIR / "e1" / aot.META_FILE
    record.parent.mkdir(parents=True)
    record.write_bytes(meta(model, inputs=aot.call_spec({"x": torch.ones(1, 4), "scale": 1.0})).to_json())
    pipe = TinyPipe(model)
    served = compile_pipeline(pipe, tmp_path, strict=True)
    before = len(compile_ledger().entries())
    with pytest.raises(CompileRefused) as caught:
        pipe.transformer(x=torch.ones(2, 4), scale=1.0)   # another shape than the precompiled function's
    forward = served.components["transformer"]
    assert forward._fallback is None and forward.stats.fallback_calls == 0, "nothing was compiled"
    message = caught.value.message
    assert message.startswith("strict: model transformer (no shape outside watch()) would compile on inductor; "
                              "transformer: no precompiled function for this call of Tiny (x: x=2x4:float32@cpu vs "
                              "prebuilt x=1x4:float32@cpu); compile_pipeline(strict=True) refuses the fallback; ")
    [entry] = compile_ledger().entries()[before:]
    assert (entry.reason, entry.ran, entry.refused) == ("fallback", False, True)
    served.restore()


# --- a pipeline it cannot serve: one line, the pipeline untouched ----------------------------------------


@pytest.fixture(scope="module")
def pipe(pipelines: Path) -> Any:
    from cachekeeper.backends.pipeline_warmup import load_pipeline
    from cachekeeper.format.spec import ModelRef

    return load_pipeline(ModelRef("tiny-flux2-klein", "transformer", path=str(pipelines / "tiny-flux2-klein")),
                         torch.float32)


def test_without_a_cache_dir_or_a_record_the_pipeline_runs_as_loaded_after_one_line(
        pipe: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    with caplog.at_level("WARNING", logger="cachekeeper.runtime"):
        served = compile_pipeline(pipe)
        again = compile_pipeline(pipe)
    assert again is served and served.components == {} and "forward" not in pipe.transformer.__dict__
    assert [r.getMessage() for r in caplog.records] == [
        "cachekeeper: warning: TORCHINDUCTOR_CACHE_DIR is not set: no precompiled functions; "
        "Flux2KleinPipeline runs as loaded",
        "cachekeeper: warning: compile_pipeline was called again on this pipeline; the first call's functions stay"]
    served.restore()
    caplog.clear()
    with caplog.at_level("WARNING", logger="cachekeeper.runtime"):
        compile_pipeline(pipe, tmp_path).restore()
    assert [r.getMessage() for r in caplog.records] == [
        f"cachekeeper: warning: no precompiled function in {tmp_path} for a component of Flux2KleinPipeline; "
        "it runs as loaded"]
