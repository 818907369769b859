"""One real Inductor build of the tiny Flux transformer, then the promise cachekeeper sells: its files,
copied to another path (as hydrate does), make a new process compile nothing.

The build is the run's shared prebuild of examples/tiny.yaml (tests/harness/tiny.py `tiny_prebuilt`: the
real `cachekeeper prebuild`, its one build's workdir kept), so this module compiles nothing of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from cachekeeper.backends.base import BuildJob, ModelRef
from cachekeeper.backends.inductor import InductorBackend
from cachekeeper.format.spec import EntrySpec, Shape
from tests.harness.tiny import copy_tiny

pytestmark = pytest.mark.torch
pytest.importorskip("torch")
pytest.importorskip("diffusers")

REPO = Path(__file__).resolve().parents[2]
SPEC = EntrySpec("tiny-flux", "transformer", "inductor", "full", Shape(64, 64, 1), "float32")
OPTIONS = {"device": "cpu"}
TIMEOUT = 1800


@dataclass(frozen=True)
class Built:
    tmp: Path
    model: Path
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
def built(tiny_prebuilt: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    tmp = copy_tiny(tiny_prebuilt, tmp_path_factory.mktemp("inductor"))
    (workdir,) = (tmp / "builds").iterdir()   # the one entry of examples/tiny.yaml
    result = json.loads((workdir / "result.json").read_text())
    assert result["entry"] == SPEC.key, "the shared prebuild built this module's entry"
    return Built(tmp, tmp / "models" / "tiny-flux", InductorBackend().build_roots(workdir), result)


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


def test_copied_cache_makes_a_new_process_compile_nothing(built: Built) -> None:
    # What hydrate does: the included files, at other paths; the header where the server's TMPDIR says.
    serve_tmp = built.tmp / "serve-tmp"
    backend = InductorBackend()
    dests = {"cache": built.tmp / "elsewhere" / "cache",
             **InductorBackend(env={**os.environ, "TMPDIR": str(serve_tmp)}).extra_roots({})}
    for name, root in built.roots.items():
        for rel in files(root):
            if backend.include(name, rel, root / rel):
                (dests[name] / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(root / rel, dests[name] / rel)
    before = {name: files(d) for name, d in dests.items()}
    gch = next(dests["pch"].glob("*.h.gch"))
    gch_stamp = gch.stat().st_mtime_ns

    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(dests["cache"]), "TMPDIR": str(serve_tmp)}
    served = run([sys.executable, str(REPO / "examples" / "serve.py"), str(built.model), "--component",
                  "transformer", "--height", "64", "--width", "64"], env, built.tmp)  # another working dir
    assert served.returncode == 0, served.stderr[-4000:]
    out = json.loads(served.stdout.strip().splitlines()[-1])

    assert out["fxgraph_cache_miss"] == 0 and out["fxgraph_cache_hit"] >= 1
    assert out["autograd_cache_miss"] == 0 and out["autograd_cache_hit"] >= 1
    for name, d in dests.items():
        new = files(d) - before[name]
        assert all(f.startswith("locks/") for f in new), f"{name} gained non-lock files: {sorted(new)}"
    assert gch.stat().st_mtime_ns == gch_stamp, "the precompiled header was rebuilt"


def test_failed_build_exits_non_zero_with_one_clear_line(tmp_path: Path) -> None:
    backend = InductorBackend()
    roots = backend.build_roots(tmp_path)
    cmd = backend.build_command(job_for(tmp_path / "no-such-model", roots, tmp_path / "result.json"))
    proc = run(cmd.argv, cmd.env, tmp_path)
    assert proc.returncode != 0
    assert "cachekeeper-build: error: tiny-flux: cannot load transformer" in proc.stderr
    assert not (tmp_path / "result.json").exists()
