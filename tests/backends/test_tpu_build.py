"""TPUBackend's real build command, run against the simulated torch_tpu (tests/simulated), which behaves
like the released torch-tpu 0.2.0 (its docstring says where each behaviour was read).

Each build is a subprocess importing torch and diffusers and compiling a tiny Flux transformer.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from cachekeeper.backends.base import BuildJob, ModelRef
from cachekeeper.backends.tpu import TPUBackend
from cachekeeper.format.spec import Shape
from tests.simulated.harness import (
    clear_device_env,
    entry,
    files_under,
    install,
    make_tiny_flux,
    publish_and_hydrate,
    run_build,
    tier2_dirs,
)

pytestmark = pytest.mark.torch

OPTIONS = {"chip": "v6e", "topology": "2x4"}


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with pytest.MonkeyPatch.context() as mp:
        clear_device_env(mp)
        # A host setting that would silently turn tier 3 off: builds must not inherit it.
        mp.setenv("TORCH_TPU_TIER2_COMPILATION_CACHE", "disabled")
        mp.setenv("CACHEKEEPER_TPU_CHIP_LOCK", str(tmp_path_factory.mktemp("lock") / "chips.lock"))
        yield install(mp, tmp_path_factory.mktemp("tpu-host") / "site")


@pytest.fixture(scope="module")
def flux(tiny_flux_models: Path, tmp_path_factory: pytest.TempPathFactory) -> ModelRef:
    return make_tiny_flux(tmp_path_factory.mktemp("models"), tiny_flux_models)


@pytest.fixture(scope="module")
def full(host: Path, flux: ModelRef, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    work = tmp_path_factory.mktemp("tpu-full")
    return work / "cache", run_build(TPUBackend(), entry("tpu", "full"), flux, work)


def entries(cache: Path) -> list[str]:
    backend = TPUBackend()
    files = files_under(cache)
    assert files and all(backend.include("cache", f, cache / f) for f in files), files  # no temps
    return files


def key_part(rel: str, i: int) -> str:
    return PurePosixPath(rel).stem.split("_")[i]


def test_a_full_build_writes_tier3_entries_under_one_platform_dir(full: tuple[Path, dict[str, Any]]) -> None:
    cache, result = full
    files = entries(cache)
    assert len({PurePosixPath(f).parts[0] for f in files}) == 1
    assert all(PurePosixPath(f).stem.count("_") == 3 for f in files)  # graphs carry an id_key: four parts
    assert result["counters"]["compiled"] == len(files) and result["counters"]["loaded"] == 0


def test_a_published_then_hydrated_dir_compiles_nothing(full: tuple[Path, dict[str, Any]], flux: ModelRef,
                                                        tmp_path: Path) -> None:
    cache, first = full
    published = publish_and_hydrate(TPUBackend(), OPTIONS, entry("tpu", "full"), cache.parent, tmp_path / "cache")
    assert published == files_under(cache)
    again = run_build(TPUBackend(), entry("tpu", "full"), flux, tmp_path)  # its root is the hydrated dir
    assert (again["counters"]["compiled"], again["counters"]["loaded"]) == (0, first["counters"]["compiled"])


def test_defer_and_fuse_shares_the_tier3_dir_and_options_key_and_differs_by_graph_key(
        full: tuple[Path, dict[str, Any]], flux: ModelRef, tmp_path: Path) -> None:
    """0.2.0 has one CompilationCache for all modes: the eager mode is not in the compile-options key."""
    result = run_build(TPUBackend(), entry("tpu", "defer_and_fuse"), flux, tmp_path)
    files, compiled = entries(tmp_path / "cache"), files_under(full[0])
    assert result["counters"]["compiled"] == len(files) > 1
    assert {PurePosixPath(f).parts[0] for f in files} == {PurePosixPath(f).parts[0] for f in compiled}
    assert {key_part(f, 2) for f in files} == {key_part(f, 2) for f in compiled}
    assert {key_part(f, 0) for f in files}.isdisjoint(key_part(f, 0) for f in compiled)


def test_libtpu_init_args_change_the_compile_options_key(full: tuple[Path, dict[str, Any]], flux: ModelRef,
                                                         tmp_path: Path) -> None:
    options = {"text_len": "8", "libtpu_init_args": "--xla_tpu_enable_latency_hiding_scheduler=true"}
    run_build(TPUBackend(), entry("tpu", "full"), flux, tmp_path, options=options)
    assert {key_part(f, 2) for f in entries(tmp_path / "cache")}.isdisjoint(
        key_part(f, 2) for f in files_under(full[0]))


def test_a_build_in_the_slot_of_chip_3_writes_the_keys_a_server_on_chip_0_asks_for(
        full: tuple[Path, dict[str, Any]], flux: ModelRef, tmp_path: Path) -> None:
    """The device assignment is in the key: a build.workers slot is its own single-process slice
    (TPU_PROCESS_BOUNDS=1,1,1), so its one chip is device 0, as a server's first chip is."""
    slot = TPUBackend().device_env([3])
    result = run_build(TPUBackend(), entry("tpu", "full"), flux, tmp_path, env=slot)
    assert entries(tmp_path / "cache") == files_under(full[0])
    assert result["counters"]["compiled"] == full[1]["counters"]["compiled"]


def test_a_process_that_sees_chip_3_without_its_own_slice_writes_other_keys(
        full: tuple[Path, dict[str, Any]], flux: ModelRef, tmp_path: Path) -> None:
    """Why device_env makes each slot a slice of its own: addressed by its host index, chip 3 keys differ."""
    run_build(TPUBackend(), entry("tpu", "full"), flux, tmp_path, env={"TPU_VISIBLE_CHIPS": "3"})
    assert set(entries(tmp_path / "cache")).isdisjoint(files_under(full[0]))


def _load(tmp_path: Path, entry_point: str | None) -> subprocess.CompletedProcess[str]:
    code = ("import dataclasses, torch\n"
            "from cachekeeper.backends.build_main import load_device_package\n"
            "from cachekeeper.backends.tpu.backend import TOOLCHAIN\n"
            f"rt = load_device_package(dataclasses.replace(TOOLCHAIN, entry_point={entry_point!r}), 'tpu', 'h')\n"
            "print(rt.device, torch.distributed.is_backend_available('tpu_dist'))\n")
    import os

    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}   # as every build sets it
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, check=False)


def test_the_build_runs_the_loader_entry_point_and_importing_alone_leaves_no_device(host: Path,
                                                                                    tmp_path: Path) -> None:
    loaded = _load(tmp_path, "torch_tpu")
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert loaded.stdout.split() == ["cpu", "True"]   # the simulated `tpu` device, and tpu_dist
    imported = _load(tmp_path, None)                   # the build before 0.2.0: import only
    assert imported.returncode != 0
    assert "torch_tpu's loader ran but registered no 'tpu' device" in imported.stderr


def test_a_tensor_parallel_build_in_a_slot_starts_through_the_launch_helper_and_serves_hydrated(
        host: Path, flux: ModelRef, tmp_path: Path) -> None:
    """Under torchrun alone the ranks would miss TORCH_TPU_SLICEBUILDER_ADDRESSES; the slot's chip
    variables are overwritten by the runtime under WORLD_SIZE, so they must not change the keys."""
    spec = entry("tpu", "full", tp=2)
    tp_flux = ModelRef(flux.name, flux.component, path=flux.path, inputs=flux.inputs, tensor_parallel=2)
    first = run_build(TPUBackend(), spec, tp_flux, tmp_path / "prebuild", env=TPUBackend().device_env([2, 3]))
    assert first["world_size"] == 2 and first["counters"]["compiled"] > 0
    publish_and_hydrate(TPUBackend(), OPTIONS, spec, tmp_path / "prebuild", tmp_path / "served" / "cache")
    served = run_build(TPUBackend(), spec, tp_flux, tmp_path / "served")
    assert served["counters"]["compiled"] == 0
    # summed over both ranks: one of them may load what the other just wrote
    assert served["counters"]["loaded"] == first["counters"]["compiled"] + first["counters"]["loaded"]


def test_two_entries_that_share_graphs_built_on_one_host_each_serve_alone_with_0_compiles(
        host: Path, flux: ModelRef, tmp_path: Path) -> None:
    """Tier 2 (/dev/shm) is shared by the host's processes and a tier-2 hit never writes tier 3 ([dev]
    compilation_cache.cc, GetFromTier2OrCompile). Two eager entries share their text-side ops: built one
    after the other, the second must still write them into its own tier-3 root, or its manifest alone
    leaves them to compile on a fresh server (another host: an empty /dev/shm)."""
    small, tall = entry("tpu", "eager"), entry("tpu", "eager", shape=Shape(64, 128, 1))
    run_build(TPUBackend(), small, flux, tmp_path / "a")
    run_build(TPUBackend(), tall, flux, tmp_path / "b")
    a, b = files_under(tmp_path / "a" / "cache"), files_under(tmp_path / "b" / "cache")
    assert set(a) & set(b)                   # the shared graphs are in both snapshots
    assert tier2_dirs() == []                # each build removed its private tier-2 cache
    for spec, built, name in ((small, tmp_path / "a", "sa"), (tall, tmp_path / "b", "sb")):
        publish_and_hydrate(TPUBackend(), OPTIONS, spec, built, tmp_path / name / "cache")
        fresh = str(tmp_path / f"{name}-shm")   # a serving host of its own
        served = run_build(TPUBackend(), spec, flux, tmp_path / name,
                           env={"SIM_TPU_SHM": fresh, "CACHEKEEPER_TPU_TIER2_BASE": fresh})
        assert served["counters"]["compiled"] == 0, name
        assert served["files"]["added"] == served["files"]["changed"] == 0, name


def test_a_build_on_a_host_with_tier2_disabled_says_so_in_one_warning_line(host: Path, flux: ModelRef,
                                                                          tmp_path: Path) -> None:
    """The module's host has TORCH_TPU_TIER2_COMPILATION_CACHE=disabled: the build runs with a private name."""
    workdir = tmp_path / "w"
    roots = TPUBackend().build_roots(workdir)
    roots["cache"].mkdir(parents=True)
    job = BuildJob(entry("tpu", "full"), flux, {k: str(v) for k, v in roots.items()}, {"text_len": "8"},
                   result_path=str(workdir / "result.json"))
    cmd = TPUBackend().build_command(job)
    proc = subprocess.run(cmd.argv, env=cmd.env, cwd=workdir, capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    warnings = [ln for ln in proc.stderr.splitlines() if ln.startswith("cachekeeper-build: warning:")]
    assert len(warnings) == 1 and "TORCH_TPU_TIER2_COMPILATION_CACHE=disabled on this host" in warnings[0]
    assert files_under(roots["cache"])       # tier 3 was written
