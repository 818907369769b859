"""NeuronXlaBackend: the XLA-era `neuronxcc-<ver>/MODULE_<hash>/` cache, imported, never partial."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cachekeeper.backends.base import BuildJob, ModelRef
from cachekeeper.backends.neuron_xla import NeuronXlaBackend
from cachekeeper.backends.neuron_xla.build import import_xla_cache
from cachekeeper.errors import BackendUnavailable, BuildFailed
from cachekeeper.format.spec import EntrySpec, Shape
from tests.simulated.harness import clear_device_env, files_under, install, run_build

VERSION = "2.22.1.0"  # the simulated neuronx-cc of DEFAULT_VERSIONS
COMPANIONS = ("model.hlo_module.pb", "compile_flags.json")


@pytest.fixture(autouse=True)
def host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    clear_device_env(monkeypatch)
    return install(monkeypatch, tmp_path / "site")


def module(root: Path, name: str, *, version: str = VERSION, done: bool = True, lock: bool = False) -> Path:
    d = root / f"neuronxcc-{version}" / f"MODULE_{name}+4fd2b7e1"
    d.mkdir(parents=True)
    for f in COMPANIONS:
        (d / f).write_bytes(b"x")
    (d / "model.neff").write_bytes(b"neff " + name.encode())
    if done:
        (d / "model.done").write_bytes(b"")
    if lock:
        (d / "model.neff.lock").write_bytes(b"")
    return d


@pytest.fixture
def existing_cache(tmp_path: Path) -> Path:
    """A NEURON_COMPILE_CACHE_URL dir as teams have them: complete, partial, locked, other-compiler modules."""
    src = tmp_path / "neuron-compile-cache"
    module(src, "10344527578179584098")
    module(src, "20000000000000000001", lock=True)             # complete, a stale lock beside it
    module(src, "30000000000000000002", done=False)            # a compile that died: no model.done
    module(src, "40000000000000000003", version="2.21.0.0")    # another compiler's
    return src


def test_include_keeps_complete_modules_of_this_compiler_only(existing_cache: Path) -> None:
    backend = NeuronXlaBackend()
    kept = [rel for rel in files_under(existing_cache) if backend.include("cache", rel, existing_cache / rel)]
    assert {rel.split("/")[1] for rel in kept} == {"MODULE_10344527578179584098+4fd2b7e1",
                                                   "MODULE_20000000000000000001+4fd2b7e1"}
    assert not any(rel.endswith(".lock") for rel in kept)
    assert all(rel.startswith(f"neuronxcc-{VERSION}/") for rel in kept)
    assert len(kept) == 2 * (len(COMPANIONS) + 2)  # companions, model.neff, model.done


def test_include_refuses_a_module_whose_marker_is_gone(existing_cache: Path) -> None:
    # Completeness is a property of the module dir on disk, not of the file's name.
    module_dir = existing_cache / f"neuronxcc-{VERSION}" / "MODULE_10344527578179584098+4fd2b7e1"
    (module_dir / "model.done").unlink()
    assert not NeuronXlaBackend().include("cache", f"{module_dir.relative_to(existing_cache)}/model.neff",
                                          module_dir / "model.neff")


def test_import_copies_complete_modules_marker_last_and_reports_the_rest(existing_cache: Path, tmp_path: Path) -> None:
    report = import_xla_cache(existing_cache, tmp_path / "dest", VERSION)
    assert report.partial == [f"neuronxcc-{VERSION}/MODULE_30000000000000000002+4fd2b7e1"]
    assert report.other_versions == ["neuronxcc-2.21.0.0"]
    first = [r for r in report.copied if "MODULE_1" in r]
    assert first[-1].endswith("/model.done") and len(first) == len(COMPANIONS) + 2
    assert files_under(tmp_path / "dest") == sorted(report.copied)


def test_a_build_imports_an_existing_cache_dir_into_the_fresh_root(existing_cache: Path, tmp_path: Path) -> None:
    backend = NeuronXlaBackend()
    spec = EntrySpec("team-cache", "all", "neuron_xla", "full", Shape(1, 1, 1), "bfloat16")
    result = run_build(backend, spec, ModelRef("team-cache", "all", path=str(existing_cache)), tmp_path / "w",
                       options={})
    assert result["counters"] == {"compiled": 0, "imported_modules": 2, "skipped_partial": 1}
    assert result["skipped_other_versions"] == ["neuronxcc-2.21.0.0"]
    built = tmp_path / "w" / "cache"
    assert files_under(built) and all(backend.include("cache", rel, built / rel) for rel in files_under(built))


def test_a_build_without_a_source_dir_says_what_to_set(tmp_path: Path) -> None:
    spec = EntrySpec("team-cache", "all", "neuron_xla", "full", Shape(1, 1, 1), "bfloat16")
    job = BuildJob(spec, ModelRef("team-cache", "all"), {"cache": str(tmp_path)}, {})
    with pytest.raises(BuildFailed, match="names no cache dir to import"):
        NeuronXlaBackend().build_command(job)


def test_fingerprint_carries_the_compiler_version_that_names_the_dir(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    before = NeuronXlaBackend().fingerprint({})
    assert before.get("neuronx_cc") == VERSION
    install(monkeypatch, tmp_path / "site2", neuronx_cc="2.23.0.0")
    after = NeuronXlaBackend().fingerprint({})
    assert set(before.diff(after)) == {"neuronx_cc"}
    # The same files are no longer this host's: a dir of another compiler version never travels.
    backend = NeuronXlaBackend()
    src = tmp_path / "c"
    module(src, "10344527578179584098")
    assert not any(backend.include("cache", rel, src / rel) for rel in files_under(src))


def test_missing_compiler_and_pins(host: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable, match=r"config pins neuronx-cc 2\.21 but 2\.22\.1\.0 is installed"):
        NeuronXlaBackend().fingerprint({"neuronx_cc_version": "2.21"})
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(host)])
    install(monkeypatch, tmp_path / "bare", neuronx_cc=None)
    reason = NeuronXlaBackend().unavailable_reason()
    assert reason is not None and "neuronx-cc is not installed" in reason and "pip install" in reason
