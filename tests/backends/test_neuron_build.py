"""NeuronBackend's real build command, run against the simulated torch-neuronx (tests/simulated).

Each build is a subprocess importing torch and diffusers and compiling a tiny Flux transformer
(about 10-30 s each on 2 cores).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cachekeeper.backends.base import BuildJob, ModelRef
from cachekeeper.backends.neuron import NeuronBackend
from cachekeeper.backends.toolchain import TORCHRUN_LOGS
from tests.simulated.harness import (
    clear_device_env,
    entry,
    files_under,
    install,
    make_tiny_flux,
    publish_and_hydrate,
    run_build,
)

pytestmark = pytest.mark.torch

OPTIONS = {"target": "trn2"}  # the simulated device's family


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with pytest.MonkeyPatch.context() as mp:
        clear_device_env(mp)
        yield install(mp, tmp_path_factory.mktemp("neuron-host") / "site")


@pytest.fixture(scope="module")
def flux(tiny_flux_models: Path, tmp_path_factory: pytest.TempPathFactory) -> ModelRef:
    return make_tiny_flux(tmp_path_factory.mktemp("models"), tiny_flux_models)


@pytest.fixture(scope="module")
def full(host: Path, flux: ModelRef, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    work = tmp_path_factory.mktemp("neuron-full")
    return work / "cache", run_build(NeuronBackend(), entry("neuron", "full"), flux, work)


def only_neffs(cache: Path) -> list[str]:
    backend = NeuronBackend()
    files = files_under(cache)
    assert files and all(backend.include("cache", f, cache / f) for f in files), files  # no temps, no locks
    return files


def test_a_full_build_writes_one_neff_per_graph_in_the_runtime_layout(full: tuple[Path, dict[str, Any]]) -> None:
    cache, result = full
    files = only_neffs(cache)
    assert result["simulated"] is True and result["counters_source"] == "runtime"
    assert result["counters"]["compiled"] == len(files) and result["counters"]["loaded"] == 0


def test_a_published_then_hydrated_dir_compiles_nothing(full: tuple[Path, dict[str, Any]], flux: ModelRef,
                                                        tmp_path: Path) -> None:
    cache, first = full
    published = publish_and_hydrate(NeuronBackend(), OPTIONS, entry("neuron", "full"), cache.parent,
                                    tmp_path / "cache")
    assert published == files_under(cache)
    again = run_build(NeuronBackend(), entry("neuron", "full"), flux, tmp_path)  # its root is the hydrated dir
    assert again["counters"]["compiled"] == 0
    assert again["counters"]["loaded"] == first["counters"]["compiled"]


def test_a_compiler_upgrade_changes_the_fingerprint_while_the_runtime_would_reuse_old_neffs(
        full: tuple[Path, dict[str, Any]], flux: ModelRef, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cache, first = full
    old = NeuronBackend().fingerprint(OPTIONS)
    install(monkeypatch, tmp_path / "site-upgraded", neuronx_cc="2.23.0.0")
    new = NeuronBackend().fingerprint(OPTIONS)
    assert old.id != new.id and set(old.diff(new)) == {"neuronx_cc"}
    # Why hydrated dirs are per fingerprint: pointed at the old dir, the upgraded runtime compiles
    # nothing and runs every NEFF the old compiler built, since its key has no compiler version.
    stale = run_build(NeuronBackend(), entry("neuron", "full"), flux, tmp_path / "w", seed_from=cache)
    assert stale["counters"]["compiled"] == 0
    assert stale["counters"]["loaded_foreign"] == stale["counters"]["loaded"] == first["counters"]["compiled"]


def test_eager_compiles_op_by_op_and_a_hydrated_copy_compiles_nothing(host: Path, flux: ModelRef,
                                                                      tmp_path: Path) -> None:
    first = run_build(NeuronBackend(), entry("neuron", "eager"), flux, tmp_path / "a")
    files = only_neffs(tmp_path / "a" / "cache")
    assert first["counters"]["compiled"] == len(files) > 10  # one NEFF per distinct op and shape
    publish_and_hydrate(NeuronBackend(), OPTIONS, entry("neuron", "eager"), tmp_path / "a", tmp_path / "b" / "cache")
    again = run_build(NeuronBackend(), entry("neuron", "eager"), flux, tmp_path / "b")
    assert (again["counters"]["compiled"], again["counters"]["loaded"]) == (0, len(files))


def test_a_tensor_parallel_build_runs_its_ranks_under_torchrun(full: tuple[Path, dict[str, Any]], flux: ModelRef,
                                                               tmp_path: Path) -> None:
    result = run_build(NeuronBackend(), entry("neuron", "full", tp=2), flux, tmp_path)
    files = only_neffs(tmp_path / "cache")
    assert result["world_size"] == 2
    # Both ranks run the same sharded graph: one compiles it, the other waits on its lock and loads it.
    assert result["counters"]["compiled"] == len(files)
    assert result["counters"]["compiled"] + result["counters"]["loaded"] == 2 * len(files)
    assert not set(files) & set(files_under(full[0]))  # a sharded graph is another NEFF
    # torchrun's run dir is in the build's workdir (removed with it), not a torchelastic_* dir left in $TMPDIR
    assert any((tmp_path / TORCHRUN_LOGS).iterdir())


def test_a_build_records_the_runtimes_own_target_and_lnc(full: tuple[Path, dict[str, Any]]) -> None:
    assert full[1]["runtime"] == {"platform_target": "trn2", "lnc": "2"}


def test_a_build_whose_device_is_another_target_fails_in_one_line(host: Path, flux: ModelRef, tmp_path: Path) -> None:
    """0.1.0 takes the target from the device, never from NEURON_PLATFORM_TARGET_OVERRIDE: a trn2 entry
    built on a trn3 device would publish trn3 NEFFs under a trn2 fingerprint."""
    roots = NeuronBackend().build_roots(tmp_path)
    roots["cache"].mkdir(parents=True)
    job = BuildJob(entry("neuron", "full"), flux, {k: str(v) for k, v in roots.items()},
                   {"target": "trn2", "text_len": "8"}, str(tmp_path / "result.json"))
    cmd = NeuronBackend().build_command(job)
    cmd.env["SIM_NEURON_TARGET"] = "trn3"   # the simulated device
    proc = subprocess.run(cmd.argv, env=cmd.env, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 1
    errors = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert errors == ["cachekeeper-build: error: neuron: the build's target is trn2 but the runtime compiles for "
                      "trn3 (torch_neuronx.utils.get_platform_target()): the NEFFs would be published under the "
                      "wrong target"]
    assert "Traceback" not in proc.stderr and files_under(roots["cache"]) == []   # stopped before compiling


def test_sync_eager_writes_the_python_layout_and_a_hydrated_copy_serves_it(host: Path, flux: ModelRef,
                                                                           tmp_path: Path) -> None:
    sync = {"NEURON_LAUNCH_BLOCKING": "1"}
    first = run_build(NeuronBackend(), entry("neuron", "eager"), flux, tmp_path / "a", env=sync)
    files = only_neffs(tmp_path / "a" / "cache")
    assert all(len(f.split("/")[0]) == 64 for f in files) and first["counters"]["compiled"] == len(files)
    publish_and_hydrate(NeuronBackend(), OPTIONS, entry("neuron", "eager"), tmp_path / "a", tmp_path / "b" / "cache")
    served = run_build(NeuronBackend(), entry("neuron", "eager"), flux, tmp_path / "b", env=sync)
    assert (served["counters"]["compiled"], served["files"]["added"]) == (0, 0)


def test_without_metrics_the_runtime_counts_nothing_and_the_files_still_tell(host: Path, flux: ModelRef,
                                                                            tmp_path: Path) -> None:
    """Why builds and the check's server run with TORCH_NEURONX_METRICS_ENABLED=1."""
    result = run_build(NeuronBackend(), entry("neuron", "full"), flux, tmp_path,
                       env={"TORCH_NEURONX_METRICS_ENABLED": "0"})
    assert result["counters"]["compiled"] == result["counters"]["loaded"] == 0
    assert result["files"]["added"] == len(only_neffs(tmp_path / "cache")) > 0
