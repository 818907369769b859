"""Pipeline warm-ups on the simulated devices (tests/simulated): TorchNeuron eager mode compiles a NEFF per
new op, TorchTPU defer-and-fuse a program per group of ops. Serving the whole pipeline on a dir hydrated
from a pipeline warm-up compiles nothing, alone or with tensor parallelism under torchrun; a component-only
warm-up of the same model leaves the text encoder, VAE and scheduler ops to compile at boot.
Each build is a subprocess (10-40 s on 2 cores)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cachekeeper.backends.base import Backend, ModelRef
from cachekeeper.backends.neuron import NeuronBackend
from cachekeeper.backends.tpu import TPUBackend
from cachekeeper.format.spec import EntrySpec, Shape
from tests.simulated.harness import clear_device_env, install, publish_and_hydrate, run_build

pytestmark = pytest.mark.torch
pytest.importorskip("transformers")

MODEL = "tiny-flux2-klein"
BACKENDS: dict[str, tuple[Backend, dict[str, str]]] = {
    "neuron": (NeuronBackend(), {"target": "trn2"}),
    "tpu": (TPUBackend(), {"chip": "v6e", "topology": "2x4"}),
}
# (backend, mode, tensor-parallel degree): the docs' default eager modes, and TP=2 as torchrun runs it.
SERVED = [("neuron", "eager", 1), ("tpu", "defer_and_fuse", 1), ("neuron", "eager", 2)]


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with pytest.MonkeyPatch.context() as mp:
        clear_device_env(mp)
        yield install(mp, tmp_path_factory.mktemp("device-host") / "site")


def entry(backend: str, mode: str, warmup: str, tp: int = 1) -> EntrySpec:
    options = {"max_sequence_length": "16"}
    if warmup == "pipeline":
        options.update(warmup="pipeline", guidance="off")
    if tp > 1:
        options["tp"] = str(tp)
    return EntrySpec(MODEL, "transformer", backend, mode, Shape(64, 64, 1), "float32",
                     options=tuple(sorted(options.items())))


def build(pipelines: Path, spec: EntrySpec, workdir: Path, seed_from: Path | None = None,
          strict: bool = False) -> dict[str, Any]:
    options = dict(spec.options)
    ref = ModelRef(MODEL, "transformer", path=str(pipelines / MODEL), warmup=options.get("warmup", "component"),
                   max_sequence_length=16, tensor_parallel=int(options.get("tp", "1")))
    return run_build(BACKENDS[spec.backend][0], spec, ref, workdir, options={}, seed_from=seed_from, strict=strict)


def hydrated(spec: EntrySpec, built: Path, dest: Path) -> Path:
    backend, options = BACKENDS[spec.backend]
    publish_and_hydrate(backend, options, spec, built, dest / "cache")
    return dest / "cache"


@pytest.mark.parametrize(("backend", "mode", "tp"), SERVED)
def test_serving_the_pipeline_on_a_hydrated_pipeline_warmup_compiles_nothing(
        host: Path, pipelines: Path, tmp_path: Path, backend: str, mode: str, tp: int) -> None:
    spec = entry(backend, mode, "pipeline", tp)
    first = build(pipelines, spec, tmp_path / "prebuild")
    assert first["world_size"] == tp
    assert first["counters"]["compiled"] > 50   # the text encoder, transformer, VAE and scheduler ops
    # Served as the canary replays it, under strict mode fail: a fully hydrated pipeline is no error (run_build
    # asserts exit 0), whatever the mode (eager ops, torchrun ranks).
    served = build(pipelines, spec, tmp_path / "served", seed_from=hydrated(spec, tmp_path / "prebuild",
                                                                             tmp_path / "boot"), strict=True)
    assert served["counters"]["compiled"] == 0
    assert served["counters"]["loaded"] == first["counters"]["compiled"] + first["counters"]["loaded"]


def test_a_component_only_warmup_leaves_neffs_for_boot(host: Path, pipelines: Path, tmp_path: Path) -> None:
    component = entry("neuron", "eager", "component")
    built = build(pipelines, component, tmp_path / "component")
    assert built["counters"]["compiled"] > 0
    served = build(pipelines, entry("neuron", "eager", "pipeline"), tmp_path / "served",
                   seed_from=hydrated(component, tmp_path / "component", tmp_path / "boot"))
    assert served["counters"]["compiled"] > 0   # the text encoder and VAE ops compile on the first request
    assert served["counters"]["loaded"] > 0     # the transformer's ops were warmed


def test_a_captured_component_warmup_compiles_the_graph_the_pipeline_runs(host: Path, pipelines: Path,
                                                                          tmp_path: Path) -> None:
    """Compiled mode (`full`): the component alone, fed its captured arguments, compiles exactly the graph
    that `pipe(...)` then asks for (one NEFF per graph; the eager rest is not counted in compiled mode)."""
    component = entry("neuron", "full", "component")
    built = build(pipelines, component, tmp_path / "component")
    assert built["counters"]["compiled"] >= 1
    served = build(pipelines, entry("neuron", "full", "pipeline"), tmp_path / "served",
                   seed_from=hydrated(component, tmp_path / "component", tmp_path / "boot"))
    assert served["counters"]["compiled"] == 0
    assert served["counters"]["loaded"] == built["counters"]["compiled"]
