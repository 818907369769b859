"""Inductor mode `aot`: a precompiled function travels in the entry's manifest, and cachekeeper.runtime
serves it in a fresh process without compiling, or falls back to torch.compile (one warning line) when it
must not run it: another call signature, a corrupt file, a missing kernel, another toolchain, changed source.

One real prebuild of the tiny Flux transformer through the CLI (file store, no catalog), hydrated once into
a fresh "instance"; every damaged case is a copy of that hydrated dir, all served by one process.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cachekeeper.backends.inductor import aot
from cachekeeper.config import parse_config
from cachekeeper.runtime.component import Record, choose, files_problem, source_problem
from tests.compiles import Instance, run, warnings
from tests.harness.tiny import copy_tiny

REPO = Path(__file__).resolve().parents[2]
CONFIG = """\
version: 1
defaults:
  backends: [inductor]
  modes: [aot]
  dtypes: [float32]
  shapes: {height: [64], width: [64], batch: [1]}
backend_options:
  inductor: {device: cpu}
models:
  - name: tiny-flux
    path: ./models/tiny-flux
    component: transformer
    inputs: flux
"""


def files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def instance(tiny_flux_models: Path, tmp_path_factory: pytest.TempPathFactory) -> Instance:
    pytest.importorskip("torch")
    pytest.importorskip("diffusers")
    tmp = tmp_path_factory.mktemp("aot")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CACHEKEEPER_", "TORCHINDUCTOR_"))}
    env["CACHEKEEPER_HOME"] = str(tmp / "home")
    copy_tiny(tiny_flux_models, tmp / "models")  # examples/make_tiny_model.py --only tiny-flux, built once
    (tmp / "aot.yaml").write_text(CONFIG)
    (tmp / "build-tmp").mkdir()
    run([sys.executable, "-m", "cachekeeper", "prebuild", str(tmp / "aot.yaml"), "--no-catalog"],
        {**env, "TMPDIR": str(tmp / "build-tmp")}, tmp)
    boot = {**env, "TMPDIR": str(tmp / "instance" / "tmp")}
    (tmp / "instance" / "tmp").mkdir(parents=True)
    hydrated = run([sys.executable, "-m", "cachekeeper", "hydrate", "--config", str(tmp / "aot.yaml"), "--dest",
                    str(tmp / "instance" / "ck"), "--json"], boot, tmp / "instance")
    dest = Path(json.loads(hydrated.stdout)["dest"])   # the toolchain's own dir under the dest
    return Instance(tmp, tmp / "models" / "tiny-flux", dest, {**boot, "TORCHINDUCTOR_CACHE_DIR": str(dest)})


def edit_meta(entry: Path, change: Any) -> None:
    meta = json.loads((entry / aot.META_FILE).read_text())
    change(meta)
    (entry / aot.META_FILE).write_text(json.dumps(meta))


# --- the promise: a fresh process on a hydrated dir runs the precompiled function, compiling nothing -----


@pytest.mark.torch
def test_one_hydrate_brings_the_function_with_its_kernels_and_header(instance: Instance) -> None:
    entry = instance.entry
    assert {aot.FUNCTION_FILE, aot.META_FILE} <= {p.name for p in entry.iterdir()}
    meta = aot.AotMeta.from_json((entry / aot.META_FILE).read_bytes())
    assert meta.entry == entry.name and meta.model_class.endswith("FluxTransformer2DModel")
    assert any(f.endswith(".so") for f in meta.files) and not files_problem(instance.dest, meta.files)
    assert meta.inputs["hidden_states"]["tensor"] == [1, 16, 16] and meta.inputs["return_dict"]["constant"] is False
    assert list((Path(instance.env["TMPDIR"])).glob("torchinductor_*/precompiled_headers/*.h.gch"))


@pytest.mark.torch
def test_a_fresh_process_serves_the_precompiled_function_and_compiles_nothing(instance: Instance) -> None:
    before = files(instance.dest)
    served = run([sys.executable, str(REPO / "examples" / "serve.py"), str(instance.model), "--mode", "aot",
                  "--component", "transformer", "--height", "64", "--width", "64", "--compare-eager"],
                 instance.env, instance.tmp / "instance")
    out = json.loads(served.stdout.strip().splitlines()[-1])
    assert out["precompiled_calls"] == 2 and out["fallback_calls"] == 0 and not warnings(served.stderr)
    assert out["max_abs_diff"] < 1e-4, "numerics against eager"
    # Tripwires on the compile path: Dynamo traced no frame, Inductor and AOT autograd looked nothing up.
    assert out["dynamo_frames"] == 0
    assert out["fxgraph_cache_miss"] == out["autograd_cache_miss"] == out["fxgraph_cache_hit"] == 0
    new = files(instance.dest) - before
    assert all(f.startswith("locks/") for f in new), f"the process wrote {sorted(new)}"


# --- fallbacks: one line, then torch.compile; never the wrong function -----------------------------------


@pytest.fixture(scope="module")
def scenarios(instance: Instance) -> Iterator[tuple[dict[str, dict[str, Any]], list[str]]]:
    corrupt = instance.copy("corrupt")
    (corrupt / aot.AOT_DIR / instance.entry.name / aot.FUNCTION_FILE).write_bytes(b"not a pickle" * 100)
    kernel = instance.copy("kernel")
    meta = json.loads((instance.entry / aot.META_FILE).read_text())
    so = sorted(f for f in meta["files"] if f.endswith(".so"))[0]
    (kernel / so).unlink()
    other_torch = instance.copy("torch")   # built by another torch build, then hydrated here
    edit_meta(other_torch / aot.AOT_DIR / instance.entry.name,
              lambda m: m["fingerprint"]["fields"].update(torch="2.12.0+cpu"))
    source = instance.copy("source")       # the traced source no longer hashes as at prebuild
    edit_meta(source / aot.AOT_DIR / instance.entry.name,
              lambda m: m["sources"][-1].update(checksum="0" * 64))
    scratch = instance.copy("scratch")     # the fallback compiles into this one (kernels hit by hash)
    argv = [sys.executable, str(Path(__file__).with_name("aot_scenarios.py")), str(instance.model),
            f"match={instance.dest}", f"shape={instance.dest}", f"args={instance.dest}",
            f"call:corrupt={corrupt}", f"call:kernel={kernel}", f"call:torch={other_torch}", f"call:source={source}"]
    proc = run(argv, {**instance.env, "TORCHINDUCTOR_CACHE_DIR": str(scratch)}, instance.tmp)
    results = {r["scenario"]: r for r in map(json.loads, proc.stdout.strip().splitlines())}
    yield results, warnings(proc.stderr)


@pytest.mark.torch
@pytest.mark.parametrize(("scenario", "reason"), [
    ("call:corrupt", "cannot load function.bin (UnpicklingError"),
    ("call:kernel", "kernel file"),
    ("call:torch", "built for another toolchain (torch 2.12.0+cpu -> "),
    ("call:source", "changed since the prebuild"),
])
def test_a_damaged_entry_falls_back_to_compiling_with_one_line(
        scenarios: tuple[dict[str, dict[str, Any]], list[str]], scenario: str, reason: str) -> None:
    results, lines = scenarios
    r = results[scenario]
    assert r["precompiled_calls"] == 0 and r["fallback_calls"] == 1
    assert r["max_abs_diff"] < 1e-4, "the fallback computes the model's output"
    (fallback,) = r["fallbacks"]
    assert reason in fallback
    assert sum(fallback in line for line in lines) == 1


@pytest.mark.torch
def test_another_shape_or_argument_set_is_not_served_by_the_precompiled_function(
        scenarios: tuple[dict[str, dict[str, Any]], list[str]]) -> None:
    results, _ = scenarios
    assert results["match"]["precompiled"] is True, "the prebuilt call itself is served"
    assert results["shape"]["precompiled"] is False
    assert "hidden_states=1x4x16:float32@cpu vs prebuilt hidden_states=1x16x16" in results["shape"]["fallbacks"][0]
    assert results["args"]["precompiled"] is False
    assert "return_dict=True vs prebuilt return_dict=False" in results["args"]["fallbacks"][0]


# --- bad input at prebuild: a graph break stops aot mode with one line -----------------------------------


@pytest.mark.torch
def test_a_graph_break_fails_the_prebuild_with_one_line() -> None:
    torch: Any = pytest.importorskip("torch")
    from cachekeeper.errors import BuildFailed

    def forward(self: Any, x: Any) -> Any:
        y = x * 2
        torch._dynamo.graph_break()
        return y + 1

    breaks = type("Breaks", (torch.nn.Module,), {"forward": forward})()
    with pytest.raises(BuildFailed) as exc:
        aot.aot_compile(breaks, {"x": torch.ones(2)}, {}, "tiny/breaks")
    assert "\n" not in str(exc.value) and "cannot precompile" in str(exc.value)
    assert "graph break" in exc.value.hint


# --- the checks themselves, without a compile ------------------------------------------------------------


def test_changed_source_is_caught_by_torch_s_own_checksums(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from torch._dynamo.package import SourceInfo

    (tmp_path / "ck_aot_model_v.py").write_text("def forward(x):\n    return x + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("ck_aot_model_v")
    info = SourceInfo(inlined_sources=set())
    info.add_code(module.forward.__code__)
    records = [{"module": s.module, "firstlineno": s.firstlineno, "lastlineno": s.lastlineno,
                "checksum": s.checksum} for s in info.inlined_sources]
    assert source_problem(records) == ""
    (tmp_path / "ck_aot_model_v.py").write_text("def forward(x):\n    return x + 2\n")  # an upgrade, same name
    assert "ck_aot_model_v (lines 1-3) changed since the prebuild" in source_problem(records)
    sys.modules.pop("ck_aot_model_v", None)


def _record(tmp_path: Path, inputs: dict[str, Any], cls: str = "m.Model") -> Record:
    meta = aot.AotMeta(entry="e", label="l", fingerprint={}, options={}, model_class=cls, config_sha256="",
                       forward=f"{cls}.forward", inputs=inputs, sources=(), files={}, versions={})
    return Record(tmp_path, meta)


def test_choose_serves_only_the_exact_argument_set(tmp_path: Path) -> None:
    t = {"tensor": [1, 4], "dtype": "float32", "device": "cuda:0", "contiguous": True, "requires_grad": False}
    built = _record(tmp_path, {"x": t, "return_dict": {"constant": False, "type": "bool"}})
    call = {"x": t, "return_dict": {"constant": False, "type": "bool"}}
    assert choose([built], "m.Model", call).record is built
    assert "cpu" in choose([built], "m.Model", {**call, "x": {**t, "device": "cpu"}}).reason
    assert "bfloat16" in choose([built], "m.Model", {**call, "x": {**t, "dtype": "bfloat16"}}).reason
    assert "extra: y" in choose([built], "m.Model", {**call, "y": t}).reason
    assert "missing: return_dict" in choose([built], "m.Model", {"x": t}).reason
    assert choose([built], "other.Model", call).record is None
    assert choose([], "m.Model", call).record is None


def test_an_unreadable_or_future_record_is_a_reason_not_a_crash() -> None:
    with pytest.raises(ValueError, match="format 3, this cachekeeper reads 1, 2"):
        aot.AotMeta.from_json(b'{"v": 3}')
    with pytest.raises(ValueError, match="malformed"):
        aot.AotMeta.from_json(b'{"v": 1, "entry": "x"}')


# --- keys: the model's code is part of an aot entry -------------------------------------------------------


def test_an_aot_entry_key_names_the_installed_diffusers_build(tmp_path: Path) -> None:
    text = CONFIG.replace("modes: [aot]", "modes: [aot, full]")
    entries = {e.spec.mode: e.spec for e in parse_config(text, "t.yaml", tmp_path).entries()}
    options = dict(entries["aot"].options)
    assert options[aot.KEY_DIFFUSERS] == aot.key_options()[0][1]
    assert len(options[aot.KEY_SOURCE]) == 16 or options[aot.KEY_SOURCE] == "none"
    assert not any(k.startswith("aot_") for k, _ in entries["full"].options), "other modes keep their keys"


def test_a_missing_or_truncated_kernel_and_an_unreadable_record_are_named(tmp_path: Path) -> None:
    from cachekeeper.runtime.component import find_records

    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / "k.so").write_bytes(b"x" * 10)
    assert files_problem(tmp_path, {"ab/k.so": 10}) == ""
    assert "has 10 bytes, the prebuild wrote 12" in files_problem(tmp_path, {"ab/k.so": 12})
    assert "ab/gone.so is missing" in files_problem(tmp_path, {"ab/gone.so": 1})
    assert find_records(tmp_path) == []
    (tmp_path / aot.AOT_DIR / "e1").mkdir(parents=True)
    (tmp_path / aot.AOT_DIR / "e1" / aot.META_FILE).write_text("{not json")
    (record,) = find_records(tmp_path)
    assert record.meta is None and "unreadable record" in record.problem
    assert "unreadable record" in choose([record], "m.Model", {}).reason


def test_without_a_hydrated_dir_every_call_compiles_and_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("torch")
    from cachekeeper.runtime import CompiledComponent

    helper = CompiledComponent(object(), None)
    with caplog.at_level("WARNING", logger="cachekeeper.runtime"):
        assert helper.precompiled_for(x=1) is False
        assert helper.precompiled_for(x=2) is False
    assert helper.stats.fallbacks == ["TORCHINDUCTOR_CACHE_DIR is not set"]
    assert [r.getMessage() for r in caplog.records] == [
        "cachekeeper: warning: TORCHINDUCTOR_CACHE_DIR is not set; compiling with torch.compile instead"]
