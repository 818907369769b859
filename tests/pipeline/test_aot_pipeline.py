"""Precompiled pipelines, for real: the `warmup: pipeline` entry in mode `aot` for tiny FLUX.2-klein
through the CLI (the function precompiled for the component's call captured from a real pipeline call, plus
the fallback's regular cache entries), hydrated into a fresh instance, and a server that calls
`cachekeeper.runtime.compile_pipeline(pipe)` after `from_pretrained`.

One prebuild of one entry for the module (a precompile and a fallback compile, about 45 s on 2 busy cores);
the bad-input cases share one serving process (aot_pipeline_scenarios.py) and only one of them compiles: the
fallback of the prebuilt call, which is a warm load. One family per mode: FLUX.1 runs end to end in `full`
(test_inductor_pipeline_loop.py); the call spec of its dict argument (`joint_attention_kwargs={}`), which
serving matches by equality, is tested in test_compile_pipeline_checks.py.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cachekeeper.backends.inductor import aot
from tests import compiles
from tests.compiles import run, warnings
from tests.fakes import served

pytestmark = pytest.mark.torch
pytest.importorskip("torch")
pytest.importorskip("diffusers")

REPO = Path(__file__).resolve().parents[2]
MODEL, PIPELINE = "tiny-flux2-klein", "Flux2KleinPipeline"
STEPS = 3


@dataclass(frozen=True)
class Instance(compiles.Instance):
    """The hydrated instance of tests/backends/test_inductor_aot.py; `model` is the folder of pipelines."""

    def pipeline(self, name: str) -> Path:
        return self.model / name

    def record(self, name: str) -> Path:
        (one,) = [d for d in (self.dest / aot.AOT_DIR).iterdir()
                  if aot.AotMeta.from_json((d / aot.META_FILE).read_bytes()).label.startswith(f"{name}/")]
        return one


@pytest.fixture(scope="module")
def instance(pipelines: Path, tmp_path_factory: pytest.TempPathFactory) -> Instance:
    tmp = tmp_path_factory.mktemp("aot-pipeline")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CACHEKEEPER_", "TORCHINDUCTOR_"))}
    env["CACHEKEEPER_HOME"] = str(tmp / "home")
    shutil.copytree(pipelines, tmp / "models")
    config = tmp / "aot-pipelines.yaml"
    config.write_text((REPO / "examples" / "pipelines.yaml").read_text().replace("modes: [full]", "modes: [aot]"))
    (tmp / "build-tmp").mkdir()
    run([sys.executable, "-m", "cachekeeper", "prebuild", str(config), "--model", MODEL],
        {**env, "TMPDIR": str(tmp / "build-tmp")}, tmp)
    boot = {**env, "TMPDIR": str(tmp / "instance" / "tmp")}
    (tmp / "instance" / "tmp").mkdir(parents=True)
    dest = tmp / "instance" / "ck"
    run([sys.executable, "-m", "cachekeeper", "hydrate", "--config", str(config), "--dest", str(dest), "--model",
         MODEL], boot,
        tmp / "instance")
    dest = served(dest)   # the toolchain's own dir under the dest, which the env names
    return Instance(tmp, tmp / "models", dest, {**boot, "TORCHINDUCTOR_CACHE_DIR": str(dest)})


# --- the promise: compile_pipeline serves every step from the precompiled function, as eager computes --


def test_a_server_calling_compile_pipeline_runs_every_step_precompiled_and_matches_eager(instance: Instance) -> None:
    served = run([sys.executable, str(REPO / "examples" / "serve_pipeline.py"), str(instance.pipeline(MODEL)),
                  "--mode", "aot", "--compare-eager", "--height", "64", "--width", "64", "--max-sequence-length",
                  "16", "--guidance-scale", "1.0", "--prompt", "any other prompt than the warm-up's",
                  "--steps", str(STEPS), "--seed", "7"], instance.env, instance.tmp / "instance")
    out = json.loads(served.stdout.strip().splitlines()[-1])
    assert out["pipeline"] == PIPELINE and out["served"] == ["transformer"]
    assert out["precompiled_calls"] == STEPS and out["fallback_calls"] == 0 and not warnings(served.stderr)
    assert out["max_abs_diff"] < 1e-4, "the image against the eager pipeline's, same seed"
    # Tripwires on the compile path: Dynamo traced no frame, Inductor and AOT autograd looked nothing up.
    assert out["dynamo_frames"] == 0
    assert out["fxgraph_cache_hit"] == out["fxgraph_cache_miss"] == out["autograd_cache_miss"] == 0


def test_the_record_is_the_captured_pipeline_call_and_the_entry_carries_the_fallback_s_cache(
        instance: Instance) -> None:
    meta = aot.AotMeta.from_json((instance.record(MODEL) / aot.META_FILE).read_bytes())
    assert meta.component == "transformer" and meta.warmup == "pipeline" and meta.structure_sha256
    assert set(meta.versions) == {"torch", "diffusers", "transformers"}
    # What the pipeline passes and no input builder would: the padded prompt length, its explicit None.
    assert meta.inputs["encoder_hidden_states"]["tensor"][:2] == [1, 16]
    assert meta.inputs["joint_attention_kwargs"] == {"constant": None, "type": "NoneType"}
    # The same manifest brings the regular FX-graph and AOT-autograd entries the fallback loads.
    assert any(f.startswith("fxgraph/") for f in meta.files) and any(f.startswith("aotautograd/") for f in meta.files)


# --- bad input: one line each, the server keeps serving --------------------------------------------------


@pytest.fixture(scope="module")
def scenarios(instance: Instance) -> tuple[dict[str, dict[str, Any]], list[str]]:
    other = instance.copy("other-diffusers")   # hydrated by a boot env with another diffusers than the server's
    meta_file = other / aot.AOT_DIR / instance.record(MODEL).name / aot.META_FILE
    meta = json.loads(meta_file.read_text())
    meta["versions"]["diffusers"] = "0.0.1"
    meta_file.write_text(json.dumps(meta))
    scratch = instance.copy("scratch")          # the fallback compile reads and writes this one
    script = Path(__file__).with_name("aot_pipeline_scenarios.py")
    proc = run([sys.executable, str(script), str(instance.pipeline(MODEL)), str(instance.dest), str(other)],
               {**instance.env, "TORCHINDUCTOR_CACHE_DIR": str(scratch)}, instance.tmp)
    results = {r["scenario"]: r for r in map(json.loads, proc.stdout.strip().splitlines())}
    return results, warnings(proc.stderr)


def test_the_pipeline_keeps_its_objects_attributes_and_hooks(
        scenarios: tuple[dict[str, dict[str, Any]], list[str]]) -> None:
    r = scenarios[0]["served"]
    assert r["served"] == ["transformer"] and r["precompiled_calls"] == 2 and r["fallback_calls"] == 0
    assert r["same_objects"] and r["same_attributes"] and r["forward_restored"]
    assert r["hook_calls"] == 2 * 2, "the user's pre-hook ran on every step, served and eager"
    assert r["max_abs_diff"] < 1e-4


def test_another_diffusers_falls_back_with_one_line_and_the_fallback_is_a_warm_load(
        scenarios: tuple[dict[str, dict[str, Any]], list[str]]) -> None:
    results, lines = scenarios
    r = results["diffusers"]
    assert r["precompiled_calls"] == 0 and r["fallback_calls"] == 2
    (reason,) = r["fallbacks"]
    assert reason.startswith("transformer: ") and "built with diffusers 0.0.1, this process has " in reason
    assert sum(reason in line for line in lines) == 1
    assert r["fxgraph_cache_miss"] == 0 and r["fxgraph_cache_hit"] == 1, "the prebuild left this graph's entries"
    assert r["max_abs_diff"] < 1e-4


def test_called_twice_is_one_line_and_the_first_functions_stay(
        scenarios: tuple[dict[str, dict[str, Any]], list[str]]) -> None:
    results, lines = scenarios
    r = results["twice"]
    assert r["same"] and r["installed"] == ["transformer"]
    assert r["notes"] == ["compile_pipeline was called again on this pipeline; the first call's functions stay"]
    assert sum("compile_pipeline was called again" in line for line in lines) == 1


def test_a_lora_fused_after_load_is_served_with_its_weights(
        scenarios: tuple[dict[str, dict[str, Any]], list[str]]) -> None:
    r = scenarios[0]["fused"]
    assert r["precompiled_calls"] == 2, "same module tree: the function runs and reads the new weights"
    assert r["max_abs_diff"] < 1e-4


def test_a_lora_loaded_into_the_component_is_not_served_until_it_is_unloaded(
        scenarios: tuple[dict[str, dict[str, Any]], list[str]]) -> None:
    results, lines = scenarios
    r = results["lora"]
    assert r["before"] is True and r["loaded"] is False and r["unloaded"] is True
    (reason,) = r["fallbacks"]
    assert "the module tree differs from the prebuilt one" in reason
    assert sum(reason in line for line in lines) == 1


def test_another_height_is_not_served_by_the_precompiled_function(
        scenarios: tuple[dict[str, dict[str, Any]], list[str]]) -> None:
    r = scenarios[0]["height"]
    assert r["precompiled"] is False
    assert any("hidden_states=1x24x" in f and "vs prebuilt hidden_states=1x16x" in f for f in r["fallbacks"])


def test_cpu_offload_hooks_leave_the_component_as_configured_with_one_line(
        scenarios: tuple[dict[str, dict[str, Any]], list[str]]) -> None:
    results, lines = scenarios
    r = results["offload"]
    assert r["installed"] == [] and r["hooks_kept"] and not r["top_forward_replaced"]
    (note,) = r["notes"]
    assert note.startswith("transformer has diffusers hooks on ") and "runs as configured" in note
    assert sum(note in line for line in lines) == 1
