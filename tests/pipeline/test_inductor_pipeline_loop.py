"""The pipeline loop, for real, through the CLI: prebuild the whole-pipeline warm-up of tiny FLUX.1 with
Inductor in mode `full`, hydrate into a fresh dir on a 'fresh instance', and a server process that loads the
pipeline, compiles the transformer with the documented call and runs pipe(...) with another prompt, step
count and seed compiles nothing, under strict mode fail. Asserted with Inductor's own cache counters (that
another prompt length would miss is shown cheaply in test_captured_inputs.py). One cold compile for the module
(about 40 s on 2 busy cores).

One family per mode: FLUX.1 here in `full`, FLUX.2-klein in `aot` (test_aot_pipeline.py). The other two
pairs cost 2 cold compiles (about 110 s of the suite's CPU); what only they ran end to end is tested
without a compile: each family's captured call in test_captured_inputs.py, the call spec of FLUX.1's dict
argument in test_compile_pipeline_checks.py.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.compiles import run

pytestmark = pytest.mark.torch
pytest.importorskip("torch")
pytest.importorskip("diffusers")

REPO = Path(__file__).resolve().parents[2]
MODEL, PIPELINE = "tiny-flux1", "FluxPipeline"


@pytest.fixture(scope="module")
def published(pipelines: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    tmp = tmp_path_factory.mktemp("pipeline-loop")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CACHEKEEPER_", "TORCHINDUCTOR_"))}
    env["CACHEKEEPER_HOME"] = str(tmp / "home")
    shutil.copytree(pipelines, tmp / "models")
    config = tmp / "pipelines.yaml"
    config.write_text((REPO / "examples" / "pipelines.yaml").read_text())  # ./models/... resolves next to it
    build_tmp = tmp / "build-tmp"
    build_tmp.mkdir()
    run([sys.executable, "-m", "cachekeeper", "prebuild", str(config), "--model", MODEL],
        {**env, "TMPDIR": str(build_tmp)}, tmp)
    return tmp, config, env


def test_a_server_running_the_pipeline_on_a_hydrated_dir_compiles_nothing(
        published: tuple[Path, Path, dict[str, str]]) -> None:
    tmp, config, env = published
    instance = tmp / "instance"   # a fresh host: empty TMPDIR, another working directory
    (instance / "tmp").mkdir(parents=True)
    boot = {**env, "TMPDIR": str(instance / "tmp")}
    hydrate = run([sys.executable, "-m", "cachekeeper", "hydrate", "--config", str(config), "--dest",
                   str(instance / "ck"), "--model", MODEL, "--json"], boot, instance)
    assert not json.loads(hydrate.stdout.splitlines()[0])["missing"]
    dest = Path(json.loads(hydrate.stdout.splitlines()[0])["dest"])   # the toolchain's own dir under the dest
    # Under strict mode fail, from the script's first line (`cachekeeper.runtime.replay`, as the canary runs a
    # warm-up): a fully hydrated pipeline is no error (`run` asserts exit 0 and no traceback).
    served = run([sys.executable, "-m", "cachekeeper.runtime.replay", str(REPO / "examples" / "serve_pipeline.py"),
                  str(tmp / "models" / MODEL), "--height", "64", "--width", "64", "--max-sequence-length", "16",
                  "--guidance-scale", "1.0", "--prompt", "any other text, longer than the warm-up's", "--steps", "3",
                  "--seed", "7"], {**boot, "TORCHINDUCTOR_CACHE_DIR": str(dest), "CACHEKEEPER_STRICT": "fail"},
                 instance)
    out = json.loads(served.stdout.strip().splitlines()[-1])
    assert out["pipeline"] == PIPELINE
    assert out["fxgraph_cache_miss"] == 0 and out["fxgraph_cache_hit"] >= 1
    assert out["autograd_cache_miss"] == 0 and out["autograd_cache_hit"] >= 1

