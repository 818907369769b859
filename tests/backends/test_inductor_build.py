"""One real Inductor build of the tiny Flux transformer: what it writes into its fresh roots, and what
`include` keeps of it. That those files, hydrated at other paths, make a new process compile nothing is
tests/test_inductor_loop.py, on the same build.

The build is the run's shared prebuild of examples/tiny.yaml (tests/harness/tiny.py `tiny_prebuilt`: the
real `cachekeeper prebuild`, its one build's workdir kept), so this module compiles nothing of its own.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cachekeeper.backends.base import BuildJob, ModelRef
from cachekeeper.backends.inductor import InductorBackend
from cachekeeper.format.spec import EntrySpec, Shape

pytestmark = pytest.mark.torch
pytest.importorskip("torch")
pytest.importorskip("diffusers")

SPEC = EntrySpec("tiny-flux", "transformer", "inductor", "full", Shape(64, 64, 1), "float32")
OPTIONS = {"device": "cpu"}
TIMEOUT = 1800


@dataclass(frozen=True)
class Built:
    roots: dict[str, Path]
    result: dict[str, Any]


def files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)


def job_for(model: Path, roots: dict[str, Path], result: Path) -> BuildJob:
    return BuildJob(SPEC, ModelRef("tiny-flux", "transformer", path=str(model), inputs="flux"),
                    {k: str(v) for k, v in roots.items()}, OPTIONS, str(result))


@pytest.fixture(scope="module")
def built(tiny_prebuilt: Path) -> Built:
    """The shared build's kept workdir, read in place (nothing here writes to it)."""
    (workdir,) = (tiny_prebuilt / "builds").iterdir()   # the one entry of examples/tiny.yaml
    result = json.loads((workdir / "result.json").read_text())
    assert result["entry"] == SPEC.key, "the shared prebuild built this module's entry"
    roots = InductorBackend().build_roots(workdir)
    # The cache root's name was padded for the path the build ran at (relocatable: format/relocate.py),
    # not for this copy's: it is the workdir's one `cache*` dir.
    (roots["cache"],) = (p for p in workdir.iterdir() if p.name.startswith("cache"))
    return Built(roots, result)


def test_build_compiles_into_the_fresh_roots(built: Built) -> None:
    counters = built.result["counters"]
    assert counters["fxgraph_cache_miss"] >= 1 and counters["fxgraph_cache_hit"] == 0
    cache = files(built.roots["cache"])
    assert any(f.startswith("fxgraph/") for f in cache) and any(f.startswith("aotautograd/") for f in cache)
    assert any(f.endswith(".so") for f in cache)
    assert any(f.endswith(".h.gch") for f in files(built.roots["pch"]))
    assert built.result["timings"]["first_call_s"] > 0


def test_include_drops_only_locks_from_a_real_build(built: Built) -> None:
    backend = InductorBackend()
    for name, root in built.roots.items():
        dropped = {f for f in files(root) if not backend.include(name, f, root / f)}
        assert dropped and all(f.startswith("locks/") and f.endswith(".lock") for f in dropped), dropped


def test_failed_build_exits_non_zero_with_one_clear_line(tmp_path: Path) -> None:
    backend = InductorBackend()
    roots = backend.build_roots(tmp_path)
    cmd = backend.build_command(job_for(tmp_path / "no-such-model", roots, tmp_path / "result.json"))
    proc = run(cmd.argv, cmd.env, tmp_path)
    assert proc.returncode != 0
    assert "cachekeeper-build: error: tiny-flux: cannot load transformer" in proc.stderr
    assert not (tmp_path / "result.json").exists()
