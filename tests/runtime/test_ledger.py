"""The compile ledger's pieces, without torch: the verdict (reason, entry, fix) a compile gets from the served dir
and the matrix, the ledger's JSON summary, the `compile` object a spool line carries (input from the
least-trusted host, checked field by field), the reasons of a report row, the `reason` label, and the
runtimes whose counters say nothing (Neuron metrics off, a TorchTPU without `_get_cache_stats`)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from cachekeeper.backends.counters import counters_unavailable
from cachekeeper.backends.neuron.backend import TOOLCHAIN as NEURON
from cachekeeper.backends.tpu.backend import TOOLCHAIN as TPU
from cachekeeper.config import parse_config
from cachekeeper.format.layout import ReportKey
from cachekeeper.format.spec import Shape
from cachekeeper.hydration import ready
from cachekeeper.hydration.state import State, save_state
from cachekeeper.observability.metrics import by_reason
from cachekeeper.reports.compiles import CompileInfo, compile_of
from cachekeeper.reports.miss import build_report, claim, decode
from cachekeeper.runtime.ledger import MAX_ROWS, Entry, Ledger
from cachekeeper.runtime.miss_watch import CallRecord, Spool
from cachekeeper.runtime.served import Matrix, ServedDir, judge

CONFIG = """version: 1
defaults: {backends: [inductor], shapes: ['64x64x1', '128x64x1']}
models:
  - name: flux
    path: /models/flux
"""
MATRIX = Matrix.of(parse_config(CONFIG, "ck.yaml"))
KEY64, KEY128 = (k for k in (MATRIX.keys_for("flux", "inductor", Shape(64, 64, 1))[0],
                             MATRIX.keys_for("flux", "inductor", Shape(128, 64, 1))[0]))
KEY96 = MATRIX.would_be("flux", "inductor", Shape(96, 64, 1))   # the entry 96x64 would be, once in the matrix


def served(path: Path, placed: set[str], ready_entries: set[str] | None = None, complete: bool = False) -> ServedDir:
    return ServedDir(path, frozenset(placed), frozenset(ready_entries) if ready_entries is not None else None, complete)


# --- the verdict -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("hints", "shape", "placed", "ready_entries", "reason", "key"), [
    ((), Shape(96, 64, 1), {KEY64, KEY128}, None, "no_artifact", KEY96),                 # not in the matrix
    ((), Shape(128, 64, 1), {KEY64}, None, "no_artifact", KEY128),                       # in it, not in the dir
    ((), Shape(64, 64, 1), {KEY64}, None, "fingerprint", KEY64),                         # in the dir, not taken
    ((), Shape(128, 64, 1), {KEY64}, {KEY64}, "not_hydrated", KEY128),                   # hot first: not placed yet
    ((), Shape(96, 64, 1), {KEY64}, {KEY64}, "no_artifact", KEY96),                      # hot first, not in the matrix
    (("fallback",), Shape(64, 64, 1), {KEY64}, None, "fallback", KEY64),
    (("autotune",), Shape(64, 64, 1), {KEY64}, None, "autotune", KEY64),
], ids=["matrix-lacks", "not-built", "not-taken", "not-placed-yet", "hot-first-matrix-lacks",
        "fallback", "autotune"])
def test_the_verdict_names_the_reason_and_the_entry(tmp_path: Path, hints: tuple[str, ...], shape: Shape,
                                                      placed: set[str], ready_entries: set[str] | None,
                                                      reason: str, key: str | None) -> None:
    verdict = judge(hints, "flux", "inductor", shape, served(tmp_path / "fp", placed, ready_entries), MATRIX)
    assert (verdict.reason, verdict.key) == (reason, key)
    if key == KEY96:
        assert verdict.fix == f"add {shape.label()} to model flux's shapes and prebuild it" and not verdict.planned
        assert KEY96 not in {KEY64, KEY128} and len(KEY96 or "") == 32
    if reason == "not_hydrated":
        assert verdict.fix.startswith(f"wait for {tmp_path / '.cachekeeper' / 'complete'} before serving")


def test_without_the_matrix_a_compile_in_partial_readiness_is_not_yet_hydrated(tmp_path: Path) -> None:
    partial = served(tmp_path / "fp", {KEY64}, {KEY64})
    assert judge((), "flux", "inductor", None, partial, None).reason == "not_hydrated"
    assert judge(("recompile",), "flux", "inductor", None, served(tmp_path, set()), None).reason == "recompile"
    assert judge((), "flux", "inductor", None, served(tmp_path, set()), None).reason == "no_artifact"


def test_the_served_dir_is_read_from_hydrates_state_and_hot_firsts_markers(tmp_path: Path) -> None:
    dest, fp = tmp_path / "dest", tmp_path / "dest" / "0123456789abcdef"
    save_state(fp, State(fingerprint_id="0123456789abcdef", backend="inductor", manifests={KEY64: "d1"}))
    ready.mark(dest, ready.READY, [KEY64], "", None)
    got = ServedDir.read(fp)
    assert got.placed == {KEY64} and got.ready == {KEY64} and got.partial
    ready.mark(dest, ready.COMPLETE, [KEY64, KEY128], "", None)
    assert not ServedDir.read(fp).partial
    (dest / ".cachekeeper" / "ready").write_text("[not what ready.py writes")
    assert ServedDir.read(fp).ready is None, "a marker that is not one is absent"
    assert ServedDir.read(tmp_path / "never-hydrated").placed == frozenset()


# --- the ledger -------------------------------------------------------------------------------------------


def entry(shape: str | None = "96x64x1", reason: str = "no_artifact", model: str = "flux", **kw: object) -> Entry:
    fields: dict[str, object] = {"graphs": 2, "seconds": 1.5, "source": "runtime", "key": None}
    fields.update(kw)
    return Entry("inductor", model, shape, {"height": 96}, reason=reason, **fields)  # type: ignore[arg-type]


def test_the_summary_totals_per_backend_model_shape_and_reason() -> None:
    ledger = Ledger()
    ledger.add(entry())
    ledger.add(entry(seconds=0.5))
    ledger.add(entry(reason="recompile", graphs=0, ran=False, refused=True))
    doc = json.loads(ledger.to_json())
    assert doc["kind"] == "cachekeeper.compile-ledger" and doc["v"] == 1
    assert doc["compiled_calls"] == 3 and doc["graphs"] == 4 and doc["seconds"] == 3.5
    assert doc["by_reason"] == {"no_artifact": 2, "recompile": 1}
    rows = {(r["shape"], r["reason"]): (r["calls"], r["graphs"], r["refused"]) for r in doc["rows"]}
    assert rows == {("96x64x1", "no_artifact"): (2, 4, 0), ("96x64x1", "recompile"): (1, 0, 1)}
    assert len(doc["recent"]) == 3


def test_the_ledger_keeps_its_rows_bounded() -> None:
    ledger = Ledger()
    for i in range(MAX_ROWS + 5):
        ledger.add(entry(shape=f"{8 * (i + 1)}x64x1"))
    rows = ledger.summary()["rows"]
    assert len(rows) == MAX_ROWS + 1 and sum(r["calls"] for r in rows) == MAX_ROWS + 5
    assert next(r for r in rows if r["model"] == "other")["calls"] == 5


# --- the spool line's `compile` object, as `report` reads it ------------------------------------------------


def record(compiled: bool = True, wall: float = 2.0, height: int = 96) -> CallRecord:
    return CallRecord("flux", height, 64, 1, None, None, compiled, 1, wall, 1.7e9)


def test_a_compiled_calls_line_carries_the_ledgers_word_and_report_rows_count_it_by_reason(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "spool")
    spool.append(record(), CompileInfo("no_artifact", 2, 1.9, "runtime", "inductor"))
    spool.append(record(), CompileInfo("recompile", 1, 0.9, "files", "inductor"))
    spool.append(record(compiled=True, wall=3.0))          # an older writer: no reason
    spool.append(record(compiled=False, wall=0.1))
    taken = claim(tmp_path / "spool")
    assert not taken.warnings
    assert [compile_of(r).reason if compile_of(r) else None for r in taken.records] == \
        ["no_artifact", "recompile", None, None]
    [row] = build_report(taken.records, "0123456789abcdef", "inductor").rows
    assert row.compiled == 3
    assert row.reasons == (("no_artifact", 1, 1.9), ("recompile", 1, 1.9), ("unknown", 1, 2.9))
    rep = build_report(taken.records, "0123456789abcdef", "inductor")
    back = decode(rep.to_json(), ReportKey("0123456789abcdef", "20261201T000000Z", "0123456789abcdef", 1))
    assert not isinstance(back, str) and back.rows[0].reasons == row.reasons
    assert by_reason(row) == [("no_artifact", 1, 1.9), ("recompile", 1, 1.9), ("unknown", 1, 2.9)]


@pytest.mark.parametrize(("compile_doc", "why"), [
    ({"reason": "evil", "graphs": 1, "seconds": 1, "source": "runtime", "backend": "x"}, "compile.reason 'evil'"),
    ({"reason": "no_artifact", "graphs": -1, "seconds": 1, "source": "runtime", "backend": "x"}, "graphs"),
    ({"reason": "no_artifact", "graphs": 10**20, "seconds": 1, "source": "runtime", "backend": "x"}, "graphs"),
    ({"reason": "no_artifact", "graphs": 1, "seconds": 1e300, "source": "runtime", "backend": "x"}, "seconds"),
    ({"reason": "no_artifact", "graphs": 1, "seconds": 1, "source": "rumour", "backend": "x"}, "compile.source"),
    ({"reason": "no_artifact", "graphs": 1, "seconds": 1, "source": "runtime", "backend": "\x1b[2J"}, "backend"),
    ("no_artifact", "not a JSON object"),
], ids=["reason", "negative", "huge", "seconds", "source", "control-chars", "not-object"])
def test_a_bad_compile_object_is_one_line_and_the_file_is_set_aside(tmp_path: Path, compile_doc: object,
                                                                   why: str) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    line = {**record().__dict__, "compile": compile_doc}
    (spool / "h-1.jsonl").write_text(json.dumps(line) + "\n" + json.dumps(record(False).__dict__) + "\n")
    taken = claim(spool)
    assert len(taken.records) == 1 and taken.unreadable == 1 and len(taken.warnings) == 1
    assert why in taken.warnings[0] and "set aside" in taken.warnings[0]


def test_a_report_row_whose_reasons_lie_is_skipped(tmp_path: Path) -> None:
    rep = build_report([record(), record(compiled=False)], "0123456789abcdef", "inductor")
    doc = json.loads(rep.to_json())
    doc["rows"][0]["reasons"] = {"unknown": {"calls": 5, "compile_s": 1.0}}   # more than its compiled calls
    rk = ReportKey("0123456789abcdef", "20261201T000000Z", "0123456789abcdef", 1)
    got = decode(json.dumps(doc).encode(), rk)
    assert isinstance(got, str) and "reasons count more calls than the row's 1 compiled" in got
    doc["rows"][0]["reasons"] = {"pwned": {"calls": 1, "compile_s": 1.0}}
    assert "is not one of" in str(decode(json.dumps(doc).encode(), rk))


# --- runtimes whose counters say nothing here ---------------------------------------------------------------


def test_neuron_metrics_off_and_a_torch_tpu_without_cache_stats_say_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """0.1.0 torch_neuronx/metrics.py `is_enabled()` (NeuronBindings.cpp `_neuron_metrics_enabled`); [dev]
    torch_tpu `_get_cache_stats` (0.2.0 glue strings): stand-in modules with exactly those functions."""
    metrics = types.ModuleType("torch_neuronx.metrics")
    metrics.is_enabled = lambda: False  # type: ignore[attr-defined]
    metrics.get_counter_value = lambda name: None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch_neuronx", types.ModuleType("torch_neuronx"))
    monkeypatch.setitem(sys.modules, "torch_neuronx.metrics", metrics)
    assert "torch_neuronx metrics are off" in counters_unavailable(NEURON.counters)
    metrics.is_enabled = lambda: True  # type: ignore[attr-defined]
    assert counters_unavailable(NEURON.counters) == ""

    ops = types.ModuleType("torch_tpu._internal.device._device_ops_backend")
    ops._get_cache_hits = lambda: 0  # type: ignore[attr-defined]
    for name in ("torch_tpu", "torch_tpu._internal", "torch_tpu._internal.device"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, ops.__name__, ops)
    assert "has no _get_cache_stats" in counters_unavailable(TPU.counters)
    assert counters_unavailable({}) == "the runtime has no compile counters"
