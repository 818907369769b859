"""TPUBackend's real build command, run against the simulated torch_tpu (tests/simulated).

Each build is a subprocess importing torch and diffusers and compiling a tiny Flux transformer.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from cachekeeper.backends.base import ModelRef
from cachekeeper.backends.tpu import TPUBackend
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

OPTIONS = {"chip": "v6e", "topology": "2x4"}


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with pytest.MonkeyPatch.context() as mp:
        clear_device_env(mp)
        # A host setting that would silently turn tier 3 off: builds must not inherit it.
        mp.setenv("TORCH_TPU_TIER2_COMPILATION_CACHE", "disabled")
        yield install(mp, tmp_path_factory.mktemp("tpu-host") / "site")


@pytest.fixture(scope="module")
def flux(tmp_path_factory: pytest.TempPathFactory) -> ModelRef:
    return make_tiny_flux(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def full(host: Path, flux: ModelRef, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    work = tmp_path_factory.mktemp("tpu-full")
    return work / "cache", run_build(TPUBackend(), entry("tpu", "full"), flux, work)


def entries(cache: Path) -> list[str]:
    backend = TPUBackend()
    files = files_under(cache)
    assert files and all(backend.include("cache", f, cache / f) for f in files), files  # no temps
    return files


def options_key(rel: str) -> str:
    return PurePosixPath(rel).stem.split("_")[2]


def test_a_full_build_writes_tier3_entries_under_one_platform_dir(full: tuple[Path, dict[str, Any]]) -> None:
    cache, result = full
    files = entries(cache)
    assert len({PurePosixPath(f).parts[0] for f in files}) == 1
    assert result["counters"]["compiled"] == len(files) and result["counters"]["loaded"] == 0


def test_a_published_then_hydrated_dir_compiles_nothing(full: tuple[Path, dict[str, Any]], flux: ModelRef,
                                                        tmp_path: Path) -> None:
    cache, first = full
    published = publish_and_hydrate(TPUBackend(), OPTIONS, entry("tpu", "full"), cache.parent, tmp_path / "cache")
    assert published == files_under(cache)
    again = run_build(TPUBackend(), entry("tpu", "full"), flux, tmp_path)  # its root is the hydrated dir
    assert (again["counters"]["compiled"], again["counters"]["loaded"]) == (0, first["counters"]["compiled"])


def test_defer_and_fuse_compiles_fused_programs_under_their_own_options_key(
        full: tuple[Path, dict[str, Any]], flux: ModelRef, tmp_path: Path) -> None:
    result = run_build(TPUBackend(), entry("tpu", "defer_and_fuse"), flux, tmp_path)
    files = entries(tmp_path / "cache")
    assert result["counters"]["compiled"] == len(files) > 1
    assert {options_key(f) for f in files}.isdisjoint(options_key(f) for f in files_under(full[0]))
