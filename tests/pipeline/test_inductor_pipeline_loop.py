"""The pipeline loop, for real, through the CLI: prebuild whole-pipeline warm-ups of tiny FLUX.2-klein and
FLUX.1 with Inductor, hydrate into a fresh dir on a 'fresh instance', and a server process that loads the
pipeline, compiles the transformer with the documented call and runs pipe(...) with another prompt, step
count and seed compiles nothing. Asserted with Inductor's own cache counters (that another prompt length
would miss is shown cheaply in test_captured_inputs.py). Two cold compiles for the
module (about 1 minute each on 2 busy cores).
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
FAMILIES = {"tiny-flux2-klein": "Flux2KleinPipeline", "tiny-flux1": "FluxPipeline"}


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
    run([sys.executable, "-m", "cachekeeper", "prebuild", str(config)], {**env, "TMPDIR": str(build_tmp)}, tmp)
    return tmp, config, env


@pytest.mark.parametrize("model", sorted(FAMILIES))
def test_a_server_running_the_pipeline_on_a_hydrated_dir_compiles_nothing(
        published: tuple[Path, Path, dict[str, str]], model: str) -> None:
    tmp, config, env = published
    instance = tmp / f"instance-{model}"   # a fresh host: empty TMPDIR, another working directory
    (instance / "tmp").mkdir(parents=True)
    boot = {**env, "TMPDIR": str(instance / "tmp")}
    hydrate = run([sys.executable, "-m", "cachekeeper", "hydrate", "--config", str(config), "--dest",
                   str(instance / "ck"), "--json"], boot, instance)
    assert not json.loads(hydrate.stdout.splitlines()[0])["missing"]
    dest = Path(json.loads(hydrate.stdout.splitlines()[0])["dest"])   # the toolchain's own dir under the dest
    served = run([sys.executable, str(REPO / "examples" / "serve_pipeline.py"), str(tmp / "models" / model),
                  "--height", "64", "--width", "64", "--max-sequence-length", "16", "--guidance-scale", "1.0",
                  "--prompt", "any other text, longer than the warm-up's", "--steps", "3", "--seed", "7"],
                 {**boot, "TORCHINDUCTOR_CACHE_DIR": str(dest)}, instance)
    out = json.loads(served.stdout.strip().splitlines()[-1])
    assert out["pipeline"] == FAMILIES[model]
    assert out["fxgraph_cache_miss"] == 0 and out["fxgraph_cache_hit"] >= 1
    assert out["autograd_cache_miss"] == 0 and out["autograd_cache_hit"] >= 1

