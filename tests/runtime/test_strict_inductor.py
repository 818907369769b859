"""Strict mode and the canary with the real Inductor on CPU: the run's shared prebuild of examples/tiny.yaml
(tests/harness/tiny.py), hydrated once for the module on a fresh instance (its own TMPDIR: the restored
precompiled header, so no compile here pays for one).

  * the canary replays the entry on the hydrated dir under `fail`: exit 0; a config whose matrix has a shape
    the build lacks: exit 15 naming it, refused before Inductor compiled, the hydrated dir untouched;
  * a plain `torch.compile` never wrapped in `watch()` (tests/runtime/compile_fn.py): `fail` raises before
    Inductor compiles (no kernel written), `report` records each compile once with its reason (`recompile`
    for the guard failure of a second static shape) and warns once per shape, a hit under `fail` is no error,
    and `fail` without a hydrated dir is one error at the first call naming the variable.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.compiles import run
from tests.harness.tiny import copy_tiny
from tests.simulated.harness import files_under

pytestmark = pytest.mark.torch
pytest.importorskip("torch")
pytest.importorskip("diffusers")

REPO = Path(__file__).resolve().parents[2]


class Instance:
    def __init__(self, tmp: Path, config: Path, env: dict[str, str], dest: Path, served: Path) -> None:
        self.tmp, self.config, self.env, self.dest, self.served = tmp, config, env, dest, served

    def ck(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "cachekeeper", *args], env=self.env, cwd=self.tmp,
                              capture_output=True, text=True, timeout=1200)

    def compile_fn(self, cache: Path | None, strict: str, *rows: int) -> dict[str, Any]:
        env = {**self.env, "CACHEKEEPER_STRICT": strict, "CACHEKEEPER_MODEL": "tiny-fn",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), self.env.get("PYTHONPATH")]))}
        env.pop("TORCHINDUCTOR_CACHE_DIR", None)
        if cache is not None:
            env["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
        proc = run([sys.executable, "-m", "tests.runtime.compile_fn", *map(str, rows)], env, self.tmp)
        out: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
        out["stderr"] = proc.stderr
        return out


@pytest.fixture(scope="module")
def instance(tiny_prebuilt: Path, tmp_path_factory: pytest.TempPathFactory) -> Instance:
    tmp = copy_tiny(tiny_prebuilt, tmp_path_factory.mktemp("strict"), ignore=("builds",))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CACHEKEEPER_", "TORCHINDUCTOR_"))}
    (tmp / "instance-tmp").mkdir()
    env |= {"CACHEKEEPER_HOME": str(tmp / "home"), "TMPDIR": str(tmp / "instance-tmp")}
    config = tmp / "tiny.yaml"
    hydrate = run([sys.executable, "-m", "cachekeeper", "hydrate", "--config", str(config), "--dest", str(tmp / "ck"),
                   "--json"], env, tmp)
    served = Path(json.loads(hydrate.stdout)["dest"])
    return Instance(tmp, config, env, tmp / "ck", served)


def test_the_canary_passes_on_the_hydrated_host(instance: Instance) -> None:
    proc = instance.ck("canary", "--config", str(instance.config), "--dest", str(instance.dest), "--json")
    assert proc.returncode == 0, proc.stderr
    [toolchain] = json.loads(proc.stdout)["toolchains"]
    assert [(e["shape"], e["ok"], e["compiled"], e["wrote"]) for e in toolchain["entries"]] == [
        ("64x64x1", True, 0, 0)]
    assert "canary: 1 entry replayed, none would compile" in proc.stderr


def test_the_canary_names_a_shape_the_build_matrix_lacks_and_exits_14(instance: Instance) -> None:
    deploy = instance.tmp / "deploy.yaml"   # the servers will be asked for 96x64: no build has it
    deploy.write_text(instance.config.read_text().replace("height: [64]", "height: [96]"))
    before = files_under(instance.served)
    proc = instance.ck("canary", "--config", str(deploy), "--dest", str(instance.dest), "--json")
    assert proc.returncode == 15, proc.stderr
    [entry] = json.loads(proc.stdout)["toolchains"][0]["entries"]
    assert (entry["shape"], entry["ok"], entry["reason"]) == ("96x64x1", False, "no_artifact")
    assert "the replay: strict: model tiny-flux (a graph of" in entry["detail"]
    assert ") would compile on inductor" in entry["detail"], "refused before Inductor compiled"
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert errors == [f"error: canary: 1 of 1 entry would compile on this host: tiny-flux 96x64x1 on inductor "
                      f"(entry {entry['key']}: no_artifact)"]
    assert "hint: add each shape named to the config's matrix" in proc.stderr
    assert files_under(instance.served) == before, "the replay ran on a copy: the server's dir is untouched"


def test_a_plain_torch_compile_is_refused_before_inductor_compiles(instance: Instance) -> None:
    cache = instance.tmp / "fn-cache"
    shutil.copytree(instance.served, cache)   # a hydrated dir (its state file) without this function's graphs
    before = set(files_under(cache))
    out = instance.compile_fn(cache, "fail", 8)
    [call] = out["calls"]
    assert call["refused"] == "CompileRefused" and call["compiled"] is False
    assert call["wrapped_in"] == "BackendCompilerFailed", "Dynamo wraps what the backend raised"
    assert call["message"] == (
        "strict: model tiny-fn (a graph of 8x4:float32; no shape outside watch()) would compile on inductor; no "
        "artifact for this call in the served dir; the entry that would serve it: unknown (watch(pipe, "
        "config=...) names it); fix: add this shape to the model's shapes in the matrix and prebuild it")
    new = {f for f in set(files_under(cache)) - before if not f.startswith("locks/")}
    assert not new, f"Inductor wrote {sorted(new)}: it compiled"
    assert out["ledger"]["by_reason"] == {"no_artifact": 1} and out["ledger"]["graphs"] == 0


def test_report_records_each_compile_with_its_reason_and_then_fail_serves_the_hits(instance: Instance) -> None:
    cache = instance.tmp / "fn-cache-2"
    shutil.copytree(instance.served, cache)
    out = instance.compile_fn(cache, "report", 8, 16, 8, 16)
    assert [c["refused"] for c in out["calls"]] == [None] * 4
    rows = {(r["reason"], r["calls"], r["graphs"]) for r in out["ledger"]["rows"]}
    assert rows == {("no_artifact", 1, 1), ("recompile", 1, 1)}, "8 then 16: the second static shape recompiles"
    assert all(r["model"] == "tiny-fn" and r["backend"] == "inductor" for r in out["ledger"]["rows"])
    warned = [ln for ln in out["stderr"].splitlines() if ln.startswith("cachekeeper: warning: strict: ")]
    assert len(warned) == 2 and "compiled on inductor (1 graph, " in warned[0], out["stderr"]

    hits = instance.compile_fn(cache, "fail", 8, 16)   # what report compiled is now in the dir: hits only
    assert [c["refused"] for c in hits["calls"]] == [None, None] and hits["ledger"]["compiled_calls"] == 0


def test_fail_without_a_hydrated_dir_is_one_error_at_the_first_call_naming_the_variable(instance: Instance) -> None:
    out = instance.compile_fn(None, "fail", 8)
    [call] = out["calls"]
    assert call["refused"] == "CompileRefused"
    assert call["message"] == ("strict mode fail: no hydrated dir: TORCHINDUCTOR_CACHE_DIR is not set, so every "
                               "inductor compile of this process would run here")
