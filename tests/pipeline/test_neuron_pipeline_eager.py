"""Simulated TorchNeuron eager mode (a NEFF per new op, tests/simulated): serving the whole pipeline on a
dir hydrated from a pipeline warm-up compiles 0 NEFFs; a component-only warm-up of the same model leaves
the text encoder, VAE and scheduler ops to compile at boot. Each build is a subprocess (10-30 s)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cachekeeper.backends.base import ModelRef
from cachekeeper.backends.neuron import NeuronBackend
from cachekeeper.spec import EntrySpec, Shape
from tests.simulated.harness import clear_device_env, install, publish_and_hydrate, run_build

pytestmark = pytest.mark.torch
pytest.importorskip("transformers")

OPTIONS = {"target": "trn2"}
MODEL = "tiny-flux2-klein"


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with pytest.MonkeyPatch.context() as mp:
        clear_device_env(mp)
        yield install(mp, tmp_path_factory.mktemp("neuron-host") / "site")


def entry(warmup: str) -> tuple[EntrySpec, ModelRef]:
    options = {"max_sequence_length": "16"}
    if warmup == "pipeline":
        options.update(warmup="pipeline", guidance="off")
    spec = EntrySpec(MODEL, "transformer", "neuron", "eager", Shape(64, 64, 1), "float32",
                     options=tuple(sorted(options.items())))
    return spec, ModelRef(MODEL, "transformer", warmup=warmup, max_sequence_length=16)


def build(pipelines: Path, warmup: str, workdir: Path, seed_from: Path | None = None) -> dict[str, Any]:
    spec, ref = entry(warmup)
    ref = ModelRef(**{**ref.to_dict(), "path": str(pipelines / MODEL)})
    return run_build(NeuronBackend(), spec, ref, workdir, options={}, seed_from=seed_from)


def hydrated(warmup: str, built: Path, dest: Path) -> Path:
    publish_and_hydrate(NeuronBackend(), OPTIONS, entry(warmup)[0], built, dest / "cache")
    return dest / "cache"


@pytest.fixture(scope="module")
def pipeline_build(host: Path, pipelines: Path,
                   tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    work = tmp_path_factory.mktemp("pipeline-warmup")
    return work, build(pipelines, "pipeline", work)


def test_serving_the_pipeline_on_a_hydrated_pipeline_warmup_compiles_no_neff(
        pipeline_build: tuple[Path, dict[str, Any]], pipelines: Path, tmp_path: Path) -> None:
    built, first = pipeline_build
    assert first["counters"]["compiled"] > 50   # every op of the text encoder, transformer, VAE and scheduler
    served = build(pipelines, "pipeline", tmp_path, seed_from=hydrated("pipeline", built, tmp_path / "boot"))
    assert served["counters"]["compiled"] == 0
    assert served["counters"]["loaded"] == first["counters"]["compiled"]


def test_a_component_only_warmup_leaves_neffs_for_boot(pipeline_build: tuple[Path, dict[str, Any]],
                                                       pipelines: Path, tmp_path: Path) -> None:
    component = build(pipelines, "component", tmp_path / "component")
    assert 0 < component["counters"]["compiled"] < pipeline_build[1]["counters"]["compiled"]
    boot = hydrated("component", tmp_path / "component", tmp_path / "boot")
    served = build(pipelines, "pipeline", tmp_path / "served", seed_from=boot)
    assert served["counters"]["compiled"] > 0   # the text encoder and VAE ops compile on the first request
    assert served["counters"]["loaded"] > 0     # the transformer's ops were warmed
