"""Bad input for a pipeline warm-up: one line naming the model and the fix, never a traceback."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cachekeeper.backends.base import BuildJob, ModelRef
from cachekeeper.backends.inductor import InductorBackend
from cachekeeper.config import parse_config
from cachekeeper.errors import BuildFailed, ConfigError
from cachekeeper.format.spec import EntrySpec, Shape

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from cachekeeper.backends import pipeline_warmup as pw  # noqa: E402

MODEL = "tiny-flux2-klein"
SHAPE = Shape(64, 64, 1)


def ref(pipelines: Path, **kw: Any) -> ModelRef:
    return ModelRef(MODEL, kw.pop("component", "transformer"), path=kw.pop("path", str(pipelines / MODEL)), **kw)


def spec(shape: Shape = SHAPE, component: str = "transformer") -> EntrySpec:
    return EntrySpec(MODEL, component, "inductor", "full", shape, "float32")


def test_a_pipeline_class_this_diffusers_lacks(pipelines: Path, tmp_path: Path) -> None:
    folder = tmp_path / MODEL
    shutil.copytree(pipelines / MODEL, folder)
    index = json.loads((folder / "model_index.json").read_text())
    (folder / "model_index.json").write_text(json.dumps({**index, "_class_name": "Flux9Pipeline"}))
    with pytest.raises(BuildFailed) as caught:
        pw.load_pipeline(ref(pipelines, path=str(folder)), torch.float32)
    assert caught.value.message.startswith(f"{MODEL}: diffusers ")
    assert caught.value.message.endswith("has no pipeline class Flux9Pipeline")
    assert "upgrade diffusers" in caught.value.hint


def test_transformers_not_installed(pipelines: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = pw.importlib.util.find_spec
    monkeypatch.setattr(pw.importlib.util, "find_spec",
                        lambda name, *a: None if name == "transformers" else real(name, *a))
    with pytest.raises(BuildFailed, match=f"^{MODEL}: transformers is not installed") as caught:
        pw.require_pipeline_libraries(ref(pipelines))
    assert "pip install" in caught.value.hint


def test_a_component_the_pipeline_does_not_have(pipelines: Path) -> None:
    pipe = pw.load_pipeline(ref(pipelines), torch.float32)
    with pytest.raises(BuildFailed, match=f"^{MODEL}: Flux2KleinPipeline has no component 'unet'") as caught:
        pw.component_of(pipe, ref(pipelines, component="unet"))
    assert caught.value.hint == "set component: to one of text_encoder, transformer, vae"


@pytest.mark.parametrize(("model", "multiple"), [("tiny-flux2-klein", 16), ("tiny-sd3", 16), ("tiny-sdxl", 8)])
def test_a_size_the_vae_and_patch_size_cannot_take(pipelines: Path, model: str, multiple: int) -> None:
    r = ModelRef(model, "unet" if model == "tiny-sdxl" else "transformer", path=str(pipelines / model))
    pipe = pw.load_pipeline(r, torch.float32)
    component = pw.component_of(pipe, r)
    pw.check_size(r, spec(Shape(64, 64 + multiple, 1)), pipe, component)   # fits: no error
    with pytest.raises(BuildFailed, match=f"^{model}: 68x64 does not fit .* multiples of {multiple}\\)") as caught:
        pw.check_size(r, spec(Shape(68, 64, 1)), pipe, component)
    assert caught.value.hint == "use a shape such as 64x64"


def test_a_hub_model_without_a_revision() -> None:
    with pytest.raises(ConfigError, match="model 'm' from the hub needs a revision"):
        parse_config("version: 1\nmodels:\n  - name: m\n    hub: org/repo\n    backends: [inductor]\n"
                     "    shapes: ['64x64']\n")
    with pytest.raises(BuildFailed, match=r"^m: hub model org/repo has no revision") as caught:
        pw.load_pipeline(ModelRef("m", "transformer", hub="org/repo"), torch.float32)
    assert "revision" in caught.value.hint


@pytest.mark.parametrize("backend", ["neuron", "neuron_xla"])
def test_offload_on_a_backend_that_cannot_offload(backend: str) -> None:
    with pytest.raises(ConfigError, match=f"cfg:7: model 'm' offload: backend '{backend}' cannot offload") as caught:
        parse_config(f"version: 1\nmodels:\n  - name: m\n    path: /x\n    backends: [{backend}]\n"
                     "    warmup: pipeline\n    offload: model\n    shapes: ['64x64']\n", "cfg")
    assert f"drop offload or the {backend} backend" in str(caught.value)


def test_offload_on_a_cpu_inductor_build_fails_in_one_line(pipelines: Path, tmp_path: Path) -> None:
    backend = InductorBackend()
    roots = backend.build_roots(tmp_path)
    options = {"warmup": "pipeline", "guidance": "off", "offload": "model"}
    job = BuildJob(EntrySpec(MODEL, "transformer", "inductor", "full", Shape(64, 64, 1), "float32",
                             options=tuple(sorted(options.items()))),
                   ref(pipelines, warmup="pipeline", offload="model"), {k: str(v) for k, v in roots.items()},
                   {"device": "cpu"}, result_path=str(tmp_path / "result.json"))
    cmd = backend.build_command(job)
    proc = subprocess.run(cmd.argv, env=cmd.env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("cachekeeper-build:")]
    assert lines == [
        f"cachekeeper-build: error: {MODEL}: offload: model needs an accelerator; inductor builds on cpu",
        "cachekeeper-build: hint: drop offload for this model or set backend_options.inductor.device: cuda"]
