"""Miss reports and suggestions: what watch(pipe) records, how reports are bounded, and the bad input
that each gives one line and changes nothing (another schema or toolchain, over the bound, a config
edited meanwhile, out-of-range flags)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachekeeper.config import parse_config
from cachekeeper.config.editor import ConfigEdit
from cachekeeper.errors import ConfigError, UsageError
from cachekeeper.format.layout import ReportKey, parse_report_key, report_key
from cachekeeper.format.spec import Shape
from cachekeeper.inspection.suggest import served_not_prebuilt
from cachekeeper.reports.miss import MAX_REPORT_BYTES, MAX_ROWS, Report, build_report, claim, decode, read_reports
from cachekeeper.runtime.miss_watch import CallRecord, Spool, watch
from cachekeeper.stores.file import FileStore
from tests.fakes import ENABLE, fake_config

REPO = Path(__file__).resolve().parents[2]
FP = "0123456789abcdef"


def call(height: int = 96, width: int = 64, *, compiled: bool = False, wall: float = 0.1,
         model: str = "tiny") -> CallRecord:
    return CallRecord(model, height, width, 1, None, None, compiled, int(compiled), wall, 1.7e9)


# --- watch -------------------------------------------------------------------------------------------


class Pipe:
    default_sample_size, vae_scale_factor = 64, 8

    def __init__(self, cache: Path) -> None:
        self.cache = cache
        self.scheduler = "kept"

    def __call__(self, prompt: Any, **kwargs: Any) -> str:
        name = f"{kwargs.get('height', 512)}x{kwargs.get('width', 512)}"
        if not (self.cache / name).exists():
            (self.cache / name).write_bytes(b"graph")
            (self.cache / f".{name}.tmp").write_bytes(b"temp")   # a runtime's temp: not a compile
        return "image"


def test_watch_records_the_graph_arguments_and_whether_the_call_compiled(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    pipe = watch(Pipe(cache), model="flux", cache_dirs=[cache], spool=tmp_path / "spool", counter=lambda: None)
    assert pipe(["a", "b"], height=768, width=1360, num_images_per_prompt=2, guidance_scale=3.5,
                max_sequence_length=256) == "image"
    pipe("a", height=768, width=1360)
    pipe("c")                                   # the pipeline's default size: 64 x 8
    assert pipe.scheduler == "kept", "every other attribute is the pipeline's"
    taken = claim(tmp_path / "spool")
    got = [(r.model, r.height, r.width, r.batch, r.guidance, r.max_sequence_length, r.compiled, r.new_files)
           for r in taken.records]
    assert got == [("flux", 768, 1360, 4, 3.5, 256, True, 1), ("flux", 768, 1360, 1, None, None, False, 0),
                   ("flux", 512, 512, 1, None, None, True, 1)]


def test_a_broken_spool_never_fails_the_serving_call(tmp_path: Path) -> None:
    (tmp_path / "spool").write_text("a file where the spool dir should be")
    pipe = watch(Pipe(tmp_path), model="m", cache_dirs=[], spool=tmp_path / "spool")
    assert pipe("x", height=64, width=64) == "image"


# --- reports: building and reading -------------------------------------------------------------------


def test_rows_count_calls_compiles_and_the_compile_time_above_a_plain_call() -> None:
    records = [call(compiled=True, wall=10.1), call(wall=0.1), call(wall=0.1), call(64, 64, wall=0.2)]
    rep = build_report(records, FP, "fake", host="e" * 16)
    first = rep.rows[0]
    assert (first.shape, first.calls, first.compiled, first.compile_s) == ("96x64x1", 3, 1, 10.0)
    assert decode(rep.to_json(), ReportKey(FP, "20260101T000000Z", "a" * 16, 1)) == rep


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 400), st.integers(1, 400), st.text(min_size=1, max_size=300)),
                min_size=1, max_size=400))
def test_a_report_never_exceeds_its_bound(calls: list[tuple[int, int, str]]) -> None:
    rep = build_report([call(8 * h, 8 * w, model=m) for h, w, m in calls], FP, "fake")
    assert len(rep.to_json()) <= MAX_REPORT_BYTES and len(rep.rows) <= MAX_ROWS
    assert sum(r.calls for r in rep.rows) + rep.dropped == len(calls), "every call is counted or dropped"


@given(st.text(max_size=80))
def test_report_keys_parse_back_and_nothing_else_parses(noise: str) -> None:
    key = report_key(FP, "20261201T101500Z", "ab" * 8, 42)
    assert parse_report_key(key) == ReportKey(FP, "20261201T101500Z", "ab" * 8, 42)
    assert parse_report_key(f"reports/{noise}") is None or noise.endswith(".json")


def _put(store: FileStore, doc: dict[str, Any] | bytes, n: int) -> str:
    key = report_key(FP, "20261201T101500Z", "ab" * 8, n)
    store.put_bytes(key, doc if isinstance(doc, bytes) else json.dumps(doc).encode())
    return key


def test_reports_of_another_schema_or_toolchain_or_over_the_bound_are_skipped_with_one_line_each(
        tmp_path: Path) -> None:
    store = FileStore(tmp_path, create=True)
    good = json.loads(build_report([call(compiled=True)], FP, "fake").to_json())
    _put(store, good, 1)
    _put(store, {**good, "v": 99}, 2)
    _put(store, {**good, "fingerprint_id": "f" * 16}, 3)
    _put(store, b" " * (MAX_REPORT_BYTES + 1), 4)
    reports, skipped = read_reports(store, FP)
    assert len(reports) == 1 and reports[0].rows[0].shape == "96x64x1"
    assert len(skipped) == 3 and all("\n" not in s and s.endswith("skipped") for s in skipped)
    assert "schema version 99" in skipped[0] and "toolchain 'ffffffffffffffff'" in skipped[1]
    assert f"more than the {MAX_REPORT_BYTES} allowed" in skipped[2]


# --- suggestions -------------------------------------------------------------------------------------


def test_suggestions_rank_by_hosts_that_compiled_then_compile_time() -> None:
    def rep(host: str, *records: CallRecord) -> Report:
        return build_report(list(records), FP, "fake", host=host)

    reports = [rep("a" * 16, call(96, 64, compiled=True, wall=5), call(128, 64, compiled=True, wall=50)),
               rep("b" * 16, call(96, 64, compiled=True, wall=5), *[call(64, 64)] * 9)]
    ranked = served_not_prebuilt(reports, lambda fp, model, shape: shape == Shape(64, 64, 1))
    assert [s.shape.label() for s in ranked] == ["96x64x1", "128x64x1"]
    assert ranked[1].line() == "add 128x64x1 to model tiny: 1 call, 1 host compiled it, 50.0 s of compile"
    big = ranked[0]
    big.calls, big.compile_s = 1204, 41 * 60
    big.hosts = {str(i) for i in range(37)}
    assert big.line() == "add 96x64x1 to model tiny: 1,204 calls, 37 hosts compiled it, 41 min of compile"


# --- suggest --apply: the config editor ----------------------------------------------------------------


CONFIG = """# fleet
version: 1
defaults:
  backends: [inductor]   # only one
  shapes: [64x64]
models:
  - name: a
    path: {model}     # local
    shapes:
      - 64x64x1       # the first
  - name: b
    path: {model}
"""


def test_the_editor_adds_shapes_keeping_comments_and_leaves_other_models_alone(tmp_path: Path) -> None:
    path = tmp_path / "ck.yaml"
    path.write_text(CONFIG.format(model=tmp_path))
    edit = ConfigEdit.read(path)
    config = parse_config(edit.text, str(path))
    text, notes = edit.add_shapes(config, {"a": [Shape(768, 1360, 1)]})
    assert notes == [], "a list no other key shares is extended in place, without a note"
    assert text == edit.text.replace("      - 64x64x1       # the first\n",
                                     "      - 64x64x1       # the first\n      - 768x1360x1\n")
    edit.write(text)
    assert [m.shapes for m in parse_config(path.read_text(), str(path)).models] == [
        (Shape(64, 64, 1), Shape(768, 1360, 1)), (Shape(64, 64, 1),)]


def test_apply_refuses_a_config_changed_since_it_was_read(tmp_path: Path) -> None:
    path = tmp_path / "ck.yaml"
    path.write_text(CONFIG.format(model=tmp_path))
    edit = ConfigEdit.read(path)
    text, _ = edit.add_shapes(parse_config(edit.text, str(path)), {"b": [Shape(128, 128, 1)]})
    path.write_text(path.read_text() + "# someone else's edit\n")
    with pytest.raises(UsageError, match="changed since it was read; nothing was written"):
        edit.write(text)
    assert path.read_text().endswith("# someone else's edit\n")


# --- the commands: flags checked at the edge, no torch in the reporter ---------------------------------


def ck(tmp: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEKEEPER_")}
    env.update(ENABLE, PYTHONPATH=str(REPO), CACHEKEEPER_HOME=str(tmp / "home"),
               CACHEKEEPER_STORE=f"file://{tmp / 'store'}")
    proc = subprocess.run([sys.executable, "-m", "cachekeeper", *args], capture_output=True, text=True, env=env,
                          cwd=tmp, timeout=60)
    assert "Traceback" not in proc.stderr and (proc.returncode == 0) == ok, proc.stderr
    return proc


@pytest.mark.parametrize(("args", "says"), [
    (("report", "--watch", "0"), "--watch must be a number of seconds"),
    (("report", "--watch", "nan"), "--watch must be a number of seconds"),
    (("report", "--watch", "1e9"), "--watch must be a number of seconds"),
    (("suggest", "CONFIG", "--since", "0d"), "--since must be a positive duration"),
    (("suggest", "CONFIG", "--since", "400d"), "--since must be a positive duration"),
    (("suggest", "CONFIG", "--since", "7 weeks"), "--since must be a positive duration"),
    (("capture", "--config", "CONFIG", "--dest", "DEST", "--publish"), "publishing captured sets is off"),
])
def test_bad_flags_are_one_error_line_and_exit_2(tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    (tmp_path / "model").mkdir()
    config = tmp_path / "ck.yaml"
    config.write_text(fake_config(tmp_path / "model"))
    args = tuple(str(config) if a == "CONFIG" else str(tmp_path / "d") if a == "DEST" else a for a in args)
    proc = ck(tmp_path, *args, "--config", str(config), ok=False) if args[0] == "report" else \
        ck(tmp_path, *args, ok=False)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1 and says in errors[0], proc.stderr
    assert not (tmp_path / "store").exists(), "nothing was written"


def test_report_imports_no_torch_and_an_empty_spool_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    config = tmp_path / "ck.yaml"
    config.write_text(fake_config(tmp_path / "model"))
    Spool(tmp_path / "spool").append(call(compiled=True))
    (tmp_path / "store").mkdir()
    code = ("import sys, runpy\n"
            "sys.argv = ['cachekeeper', 'report', '--config', sys.argv[1], '--spool', sys.argv[2]]\n"
            "try:\n    runpy.run_module('cachekeeper', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules, 'diffusers' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEKEEPER_")}
    env.update(ENABLE, PYTHONPATH=str(REPO), CACHEKEEPER_STORE=f"file://{tmp_path / 'store'}")
    proc = subprocess.run([sys.executable, "-c", code, str(config), str(tmp_path / "spool")], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=60)
    assert proc.stdout.split() == ["False", "False"] and "report: 1 calls" in proc.stderr, proc.stderr
    assert len(list((tmp_path / "store" / "reports").rglob("*.json"))) == 1
    again = ck(tmp_path, "report", "--config", str(config), "--spool", str(tmp_path / "spool"))
    assert "nothing served" in again.stderr
    assert len(list((tmp_path / "store" / "reports").rglob("*.json"))) == 1


def test_the_report_sidecar_writes_at_most_one_report_per_interval_and_the_rest_when_stopped(
        tmp_path: Path) -> None:
    import signal
    import time

    (tmp_path / "model").mkdir()
    (tmp_path / "store").mkdir()
    config = tmp_path / "ck.yaml"
    config.write_text(fake_config(tmp_path / "model"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEKEEPER_")}
    env.update(ENABLE, PYTHONPATH=str(REPO), CACHEKEEPER_STORE=f"file://{tmp_path / 'store'}")
    proc = subprocess.Popen([sys.executable, "-m", "cachekeeper", "report", "--config", str(config), "--spool",
                             str(tmp_path / "spool"), "--watch", "1"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    spool = Spool(tmp_path / "spool")
    t0 = time.monotonic()
    served = 0
    while time.monotonic() - t0 < 3.5:      # a busy server: a call every 20 ms
        spool.append(call(compiled=served == 0))
        served += 1
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err, err
    elapsed = time.monotonic() - t0
    reports, skipped = read_reports(FileStore(tmp_path / "store"), None)
    assert skipped == [] and 2 <= len(reports) <= int(elapsed) + 1, "one per interval, plus the last round"
    assert sum(r.calls for rep in reports for r in rep.rows) == served, "every call reported once"


@pytest.mark.parametrize("value", ["pub", "yes", "3", "off"])
def test_the_capture_key_takes_report_or_publish_only(tmp_path: Path, value: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in ENABLE.items():
        monkeypatch.setenv(k, v)
    text = fake_config(tmp_path) + f"capture: {value}\n"
    with pytest.raises(ConfigError, match=r"ck\.yaml:\d+: config capture must be") as info:
        parse_config(text, str(tmp_path / "ck.yaml"))
    assert "\n" not in str(info.value)
    assert parse_config(fake_config(tmp_path) + "capture: publish\n", str(tmp_path / "ck.yaml")).capture_publish
    assert not parse_config(fake_config(tmp_path), str(tmp_path / "ck.yaml")).capture_publish


# --- suggest: only shapes a config can hold, and never a shared list grown behind the user's back ---------


ANCHORED = """version: 1
defaults:
  backends: [fake]
  modes: [full]
  dtypes: [float32]
models:
  - name: a
    path: {model}
    shapes: &common [64x64x1]   # a and b serve the same sizes
  - name: b
    path: {model}
    shapes: *common
  - name: c
    path: {model}
    shapes: &solo
      - 64x64x1
"""


def test_apply_unshares_a_list_other_models_share_through_an_anchor_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in ENABLE.items():
        monkeypatch.setenv(k, v)
    path = tmp_path / "ck.yaml"
    path.write_text(ANCHORED.format(model=tmp_path))
    edit = ConfigEdit.read(path)
    text, notes = edit.add_shapes(parse_config(edit.text, str(path)), {"a": [Shape(96, 64, 1)],
                                                                       "c": [Shape(128, 64, 1)]})
    shapes = {m.model.name: [s.label() for s in m.shapes] for m in parse_config(text, str(path)).models}
    assert shapes == {"a": ["64x64x1", "96x64x1"], "b": ["64x64x1"], "c": ["64x64x1", "128x64x1"]}
    assert notes == ["model a's shapes were shared with other keys through a YAML anchor &common; a now has its "
                     "own list and the others are unchanged"], "c's anchor has no alias: extended in place, no note"
    assert "# a and b serve the same sizes" in text and "&solo" in text, "comments and anchors kept"


def test_suggest_skips_shapes_a_config_would_refuse_one_line_each(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28: `suggest` believed impossible shapes (`-64x7`), and --apply wrote what the config refuses."""
    import time

    from cachekeeper.hydration.request import resolve_request
    from cachekeeper.reports.miss import Row, write_report

    for k, v in ENABLE.items():
        monkeypatch.setenv(k, v)
    (tmp_path / "model").mkdir()
    config = tmp_path / "ck.yaml"
    config.write_text(fake_config(tmp_path / "model"))
    fp = resolve_request(config=parse_config(config.read_text(), str(config)),
                         dest=tmp_path / "d").toolchain.fingerprint.id
    store = FileStore(tmp_path / "store", create=True)

    def row(height: int, width: int = 64) -> Row:
        return Row("tiny", height, width, 1, None, None, calls=3, compiled=1, compile_s=9.0, wall_s=10.0)

    now = time.time()
    write_report(store, Report(fp, "fake", "ab" * 8, now - 60, now, (row(96), row(100), row(64, 7))))
    key = write_report(store, Report(fp, "fake", "cd" * 8, now - 60, now, (row(-64, 7),)))
    proc = ck(tmp_path, "suggest", str(config), "--apply")
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert sorted(warnings) == sorted([
        f"warning: report {key}: row 1: height: -64 is too small; skipped",
        "warning: reports name shape 100x64x1 of model tiny, which a config refuses (height 100 is not a multiple "
        "of 8 (diffusers latents need it)); skipped",
        "warning: reports name shape 64x7x1 of model tiny, which a config refuses (width 7 is not a multiple of 8 "
        "(diffusers latents need it)); skipped"]), proc.stderr
    assert "added 1 shape to" in proc.stderr
    assert sorted(s.label() for s in parse_config(config.read_text(), str(config)).models[0].shapes) == [
        "128x64x1", "64x64x1", "96x64x1"]
