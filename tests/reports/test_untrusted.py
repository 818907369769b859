"""What serving hosts write is untrusted input (issue 28, 1). A miss report in the store and a record in the
local spool come from the least-trusted machines we have, so every field is checked where it is read, and
no report or record can fail a command:

- every reader of reports (`hydrate --ready-after 1 --best-effort --print-env` through hot first, `suggest`,
  `stats --traffic`, the dashboard) gets any report hypothesis can make (non-finite, negative, huge, wrong
  types, wrong nesting, deep nesting, oversize, not JSON): exit 0, no traceback, the env printed, and at most
  one line naming each report it skipped; what it did read is within the bounds;
- `report` gets any spool (good, hostile and foreign lines; files that are links, FIFOs, dirs or oversize):
  exit 0, every good record reported once, one line per bad file, the bad file set aside and never taken
  again (a `report --watch` sidecar never crash-loops);
- a few of each through the real CLI, as a booting host runs them.

Example counts (2 cores): 40 report examples, 30 spool examples (HYPOTHESIS_PROFILE is not consulted).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from cachekeeper.bounds import SIZE
from cachekeeper.catalog import Catalog
from cachekeeper.cli import _register, cli
from cachekeeper.cli.inspect import traffic_view
from cachekeeper.config import load_config
from cachekeeper.config.schema import _NAME_RE
from cachekeeper.dashboard.app import create_app
from cachekeeper.format.layout import parse_report_key, report_key
from cachekeeper.format.spec import EntrySpec, Shape
from cachekeeper.format.spool import MAX_RECORD_BYTES, MAX_SPOOL_BYTES, MODEL_NAME, CallRecord
from cachekeeper.publish.upload import publish
from cachekeeper.reports.miss import (
    BAD,
    CLAIMED,
    MAX_REPORT_BYTES,
    Report,
    build_report,
    decode,
    read_reports,
    since_stamp,
)
from cachekeeper.stores.file import FileStore
from tests.fakes import ENABLE, FakeBackend, fake_config

REPO = Path(__file__).resolve().parents[2]
REPORT_EXAMPLES = 40
SPOOL_EXAMPLES = 30


@dataclass
class World:
    """A fleet of one tiny model (heights 64 and 128 prebuilt), its store, a catalog, and a served dashboard."""

    tmp: Path
    config: Path
    store: Path
    catalog_url: str
    fp: str
    env: dict[str, str]
    page: TestClient

    def invoke(self, *args: str) -> Result:
        return CliRunner().invoke(cli, list(args), env=self.env)

    def clear_reports(self) -> None:
        for f in (self.store / "reports").rglob("*"):
            if f.is_file():
                f.unlink()

    def put(self, data: bytes, n: int) -> str:
        key = report_key(self.fp, since_stamp(0), "ab" * 8, n)
        path = self.store / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return key


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    from cachekeeper.hydration.request import resolve_request

    _register()
    tmp = tmp_path_factory.mktemp("untrusted")
    (tmp / "model").mkdir()
    config = tmp / "ck.yaml"
    config.write_text(fake_config(tmp / "model"))
    env = {**ENABLE, "CACHEKEEPER_HOME": str(tmp / "home"), "FAKE_SHARED_DIR": str(tmp / "sh"),
           "CACHEKEEPER_STORE": f"file://{tmp / 'store'}"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        fp = resolve_request(config=load_config(config), dest=tmp / "d").toolchain.fingerprint.id
        FileStore(tmp / "store", create=True)
        catalog_url = f"sqlite:///{tmp / 'catalog.db'}"
        (tmp / "built" / "0").mkdir(parents=True)
        (tmp / "built" / "0" / "g.neff").write_bytes(b"graph")
        with Catalog.open(catalog_url, auto_migrate=True) as catalog:   # an entry, so stats lists a toolchain
            publish(FileStore(tmp / "built-store", create=True), fingerprint=FakeBackend().fingerprint({}),
                    spec=EntrySpec("tiny", "transformer", "fake", "full", Shape(64, 64, 1), "float32"),
                    roots={"cache": tmp / "built"}, include=FakeBackend().include, catalog=catalog)
            app = create_app(catalog, traffic_view(catalog, f"file://{tmp / 'store'}", 7 * 86_400))
            with TestClient(app) as page:
                yield World(tmp, config, tmp / "store", catalog_url, fp, env, page)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# --- what a hostile writer can put in a JSON document --------------------------------------------------


@dataclass(frozen=True)
class Raw:
    """JSON text emitted as is: literals json.dumps never writes (1e400, NaN, a 5,000-digit integer)."""

    text: str


def emit(value: Any) -> str:
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{emit(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(emit(v) for v in value) + "]"
    return json.dumps(value)   # nan and inf as NaN / Infinity


HOSTILE = st.one_of(
    st.none(), st.booleans(), st.integers(-(2 ** 70), 2 ** 70), st.floats(), st.text(max_size=30),
    st.text(alphabet="\n\r\x1b\x00 ;", min_size=1, max_size=5),
    st.lists(st.integers(-5, 5), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    st.sampled_from([Raw("1e400"), Raw("-1e400"), Raw("NaN"), Raw("Infinity"), Raw("-Infinity"), Raw("-0.0"),
                     Raw("9" * 5000), Raw("1" + "0" * 400), Raw("64.5"), Raw("-64"), Raw("0"), Raw('"64"')]),
)
ROW_KEYS = ("model", "height", "width", "batch", "guidance", "max_sequence_length", "calls", "compiled",
            "compile_s", "wall_s")
TOP_KEYS = ("v", "kind", "fingerprint_id", "backend", "host", "start", "end", "dropped", "rows")


def a_good_report(fp: str, heights: list[int]) -> dict[str, Any]:
    """A report as `cachekeeper report` writes it: shapes prebuilt (64, 128), not (96), and refused (100)."""
    now = time.time()
    records = [CallRecord("tiny", h, 64, 1, None, None, h != 64, int(h != 64), 2.0, now) for h in heights]
    return json.loads(build_report(records, fp, "fake", host="cd" * 8).to_json())


@st.composite
def report_documents(draw: st.DrawFn, fp: str) -> tuple[str, bytes]:
    """(what was done to a good report, its bytes)."""
    doc = a_good_report(fp, draw(st.lists(st.sampled_from([64, 96, 100, 128]), min_size=1, max_size=6)))
    how = draw(st.sampled_from(["good", "top", "drop-top", "row", "drop-row", "row-is", "nest", "deep", "oversize",
                                "bytes", "rows-many"]))
    if how == "top":
        doc[draw(st.sampled_from(TOP_KEYS))] = draw(HOSTILE)
    elif how == "drop-top":
        doc.pop(draw(st.sampled_from(TOP_KEYS)))
    elif how == "row":
        doc["rows"][draw(st.integers(0, len(doc["rows"]) - 1))][draw(st.sampled_from(ROW_KEYS))] = draw(HOSTILE)
    elif how == "drop-row":
        doc["rows"][0].pop(draw(st.sampled_from(ROW_KEYS)))
    elif how == "row-is":
        doc["rows"][draw(st.integers(0, len(doc["rows"]) - 1))] = draw(HOSTILE)
    elif how == "nest":
        doc = draw(st.sampled_from([[doc], {"report": doc}, {**doc, "rows": [doc["rows"]]},
                                    {**doc, "rows": {"0": doc["rows"][0]}}]))
    elif how == "deep":
        depth = draw(st.integers(100, 30_000))
        return how, ("[" * depth + "]" * depth).encode()
    elif how == "oversize":
        doc["pad"] = "x" * draw(st.integers(MAX_REPORT_BYTES - 100, MAX_REPORT_BYTES + 10))
    elif how == "bytes":
        return how, draw(st.binary(max_size=300))
    elif how == "rows-many":
        doc["rows"] = doc["rows"] * 300
    return how, emit(doc).encode()


def is_within_bounds(report: Report) -> bool:
    """What a reader hands on is what the format promises: names, sizes within SIZE, finite numbers."""
    def finite(*xs: float | None) -> bool:
        return all(x is None or math.isfinite(x) for x in xs)

    return finite(report.start, report.end) and report.dropped >= 0 and all(
        MODEL_NAME.fullmatch(r.model) and all(SIZE.low <= s <= SIZE.high for s in (r.height, r.width, r.batch))
        and 0 <= r.compiled <= r.calls and finite(r.guidance, r.compile_s, r.wall_s) and r.compile_s >= 0
        for r in report.rows)


def no_traceback(result: Result) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    assert "Traceback" not in result.output


def warnings(result: Result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("warning:")]


# --- reports: every reader, any report ------------------------------------------------------------------


@settings(max_examples=REPORT_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(data=st.data())
def test_no_report_fails_hydrate_suggest_stats_or_the_dashboard(world: World, data: st.DataObject) -> None:
    world.clear_reports()
    made = data.draw(st.lists(report_documents(world.fp), min_size=1, max_size=3), label="reports")
    keys = [world.put(blob, n) for n, (_, blob) in enumerate(made)]

    for (how, blob), key in zip(made, keys, strict=True):
        rk = parse_report_key(key)
        assert rk is not None
        got = decode(blob, rk)
        if isinstance(got, Report):
            assert is_within_bounds(got), got
        else:
            assert how != "good", got
            assert "\n" not in got and got.startswith(f"report {key}") and got.endswith("skipped"), got
    reports, skipped = read_reports(FileStore(world.store), world.fp)
    assert len(reports) + len(skipped) == len(made)

    boot = world.invoke("hydrate", "--config", str(world.config), "--dest", str(world.tmp / "d"),
                        "--ready-after", "1", "--best-effort", "--print-env")
    no_traceback(boot)
    assert boot.exit_code == 0 and "FAKE_CACHE_DIR=" in boot.stdout, boot.output
    hot = [w for w in warnings(boot) if w.startswith("warning: hot first")]
    assert len(hot) == (1 if skipped else 0), boot.stderr

    for args in (("suggest", str(world.config)), ("suggest", str(world.config), "--json"),
                 ("stats", "--traffic", "--catalog", world.catalog_url),
                 ("stats", "--traffic", "--json", "--catalog", world.catalog_url)):
        result = world.invoke(*args)
        no_traceback(result)
        assert result.exit_code == 0, (args, result.output)
        for line in skipped:
            assert warnings(result).count(f"warning: {line}") == 1, (args, result.stderr)

    page = world.page.get("/")
    assert page.status_code == 200 and (f"{len(skipped)} skipped" in page.text or not skipped)


# --- the spool: `report`, any spool ---------------------------------------------------------------------


def a_good_line(height: int) -> bytes:
    return json.dumps({"v": 1, "model": "tiny", "height": height, "width": 64, "batch": 1, "guidance": None,
                       "max_sequence_length": None, "compiled": True, "new_files": 1, "wall_s": 1.5,
                       "time": time.time()}).encode()


RECORD_KEYS = ("v", "model", "height", "width", "batch", "guidance", "max_sequence_length", "compiled",
               "new_files", "wall_s", "time")


@st.composite
def spool_lines(draw: st.DrawFn) -> tuple[bool, bytes]:
    """(is it a good record, the line)."""
    how = draw(st.sampled_from(["good", "good", "field", "drop", "nest", "bytes", "long", "future"]))
    if how == "good":
        return True, a_good_line(draw(st.sampled_from([64, 96, 128])))
    doc = json.loads(a_good_line(96))
    if how == "field":
        doc[draw(st.sampled_from(RECORD_KEYS))] = draw(HOSTILE)
    elif how == "drop":
        doc.pop(draw(st.sampled_from([k for k in RECORD_KEYS if k not in ("guidance", "max_sequence_length",
                                                                          "height", "width")])))
    elif how == "nest":
        doc = draw(st.sampled_from([[doc], {"record": doc}, "[" * 5000]))
    elif how == "bytes":
        return False, draw(st.binary(min_size=1, max_size=200)).replace(b"\n", b"").replace(b"\r", b"") or b"x"
    elif how == "long":
        doc["pad"] = "x" * MAX_RECORD_BYTES
    elif how == "future":
        doc["v"] = 2
    line = emit(doc).encode()
    try:   # a mutation can still be a good record (a height of 64 for 96, an unknown key's value)
        CallRecord.parse(line)
        return True, line
    except ValueError:
        return False, line


@st.composite
def spools(draw: st.DrawFn) -> list[tuple[str, Any]]:
    """Spool files: ("lines", [(good, line)]) regular files, or a thing that is no spool file at all."""
    files: list[tuple[str, Any]] = [("lines", draw(st.lists(spool_lines(), min_size=1, max_size=8)))
                                    for _ in range(draw(st.integers(1, 3)))]
    files += [(kind, None) for kind in draw(st.lists(st.sampled_from(["dir", "link", "fifo", "oversize"]),
                                                     max_size=2, unique=True))]
    return files


def lay_out(spool: Path, files: list[tuple[str, Any]]) -> tuple[int, int]:
    """Write the files; (good records, files a reporter must set aside)."""
    spool.mkdir(parents=True)
    good = aside = 0
    for i, (kind, lines) in enumerate(files):
        path = spool / f"host-{i}.jsonl"
        if kind == "lines":
            path.write_bytes(b"".join(line + b"\n" for _, line in lines))
            good += sum(ok for ok, _ in lines)
            aside += not all(ok for ok, _ in lines)
        elif kind == "dir":
            path.mkdir()
            aside += 1
        elif kind == "link":
            path.symlink_to(spool.parent / "elsewhere")
            aside += 1
        elif kind == "fifo":
            os.mkfifo(path)
            aside += 1
        else:
            with path.open("wb") as f:
                f.truncate(MAX_SPOOL_BYTES + 1)
            aside += 1
    return good, aside


@settings(max_examples=SPOOL_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(files=spools())
def test_no_spool_fails_report_and_a_bad_file_is_set_aside_never_taken_again(world: World,
                                                                             files: list[tuple[str, Any]]) -> None:
    import tempfile

    world.clear_reports()
    spool = Path(tempfile.mkdtemp(dir=world.tmp)) / "spool"
    (spool.parent / "elsewhere").write_text(json.dumps({"v": 1}) + "\n")
    good, aside = lay_out(spool, files)

    result = world.invoke("report", "--config", str(world.config), "--spool", str(spool))
    no_traceback(result)
    assert result.exit_code == 0, result.output
    assert len(warnings(result)) == aside, result.stderr
    reports, skipped = read_reports(FileStore(world.store), world.fp)
    assert skipped == [], "a report built from checked records reads back"
    assert sum(r.calls for rep in reports for r in rep.rows) + sum(rep.dropped for rep in reports) == good, \
        "every good record reported (a call without a shape in `dropped`), once"

    left = sorted(p.name for p in spool.iterdir())
    assert not any(CLAIMED in name for name in left), left
    assert len([n for n in left if n.endswith(BAD)]) == aside, left
    again = world.invoke("report", "--config", str(world.config), "--spool", str(spool))
    assert again.exit_code == 0 and warnings(again) == [], "what was set aside is never taken again"
    assert "nothing served" in again.stderr

    boot = world.invoke("hydrate", "--config", str(world.config), "--dest", str(world.tmp / "d"),
                        "--ready-after", "1", "--best-effort", "--print-env")
    no_traceback(boot)
    assert boot.exit_code == 0 and not [w for w in warnings(boot) if "hot first" in w], boot.stderr
    fix = world.invoke("suggest", str(world.config), "--json")
    # every report that reached the store is well-formed; a served shape the config would refuse (a record
    # may say height 1) is the one thing suggest may still skip
    assert fix.exit_code == 0, fix.output
    assert all("which a config refuses" in s for s in json.loads(fix.stdout)["skipped"]), fix.output


def test_hot_first_orders_by_the_good_reports_and_says_in_one_line_what_it_skipped(tmp_path: Path) -> None:
    from cachekeeper.hydration import hot

    store = FileStore(tmp_path / "store", create=True)
    good = a_good_report("e" * 16, [128, 128, 96])
    bad = {**good, "rows": [{**good["rows"][0], "calls": Raw("1e400")}]}
    keys = [report_key("e" * 16, since_stamp(0), "ab" * 8, n) for n in range(3)]
    for key, doc in zip(keys, [good, bad, bad], strict=True):
        store.put_bytes(key, emit(doc).encode())
    shapes = {"x": ("tiny", 128, 64, 1), "y": ("tiny", 96, 64, 1)}
    calls, lines = hot.read_calls(lambda: store, "e" * 16, shapes, 16)
    assert calls == {"x": 2, "y": 1}
    assert lines == [f"hot first: 2 of 3 miss reports skipped (report {keys[1]}: row 1: calls: inf is not finite; "
                     "skipped and 1 more); the other 1 order the entries"]
    (tmp_path / "store" / keys[0]).unlink()   # the good one is gone: nothing orders the entries
    calls, lines = hot.read_calls(lambda: store, "e" * 16, shapes, 16)
    assert calls == {} and len(lines) == 1 and lines[0].startswith("hot first: 2 of 2 miss reports skipped")
    assert lines[0].endswith("entries go in the config's priority order")


def test_the_spool_s_model_names_are_the_config_s() -> None:
    assert MODEL_NAME.pattern == _NAME_RE.pattern


# --- the real CLI, as a booting host and a sidecar run it ---------------------------------------------------


def ck(tmp: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEKEEPER_")}
    env.update(ENABLE, PYTHONPATH=str(REPO), CACHEKEEPER_HOME=str(tmp / "home"), FAKE_SHARED_DIR=str(tmp / "sh"),
               CACHEKEEPER_STORE=f"file://{tmp / 'store'}")
    return subprocess.run([sys.executable, "-m", "cachekeeper", *args], capture_output=True, text=True, env=env,
                          cwd=tmp, timeout=timeout)


HOSTILE_ROWS = {   # a row's height, and what the one line says of it
    "height 1e400": (Raw("1e400"), "row 1: height: inf is not finite"),
    "height NaN": (Raw("NaN"), "NaN is not a JSON number"),
    "height -64": (-64, "row 1: height: -64 is too small"),
    "height a string": ("64", "row 1: height '64' is not a whole number"),
}


def _served_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """The fake backend's config in tmp_path, and its toolchain's fingerprint id on this host."""
    from cachekeeper.hydration.request import resolve_request

    (tmp_path / "model").mkdir()
    config = tmp_path / "ck.yaml"
    config.write_text(fake_config(tmp_path / "model"))
    for k, v in ENABLE.items():
        monkeypatch.setenv(k, v)
    return config, resolve_request(config=load_config(config), dest=tmp_path / "d").toolchain.fingerprint.id


@pytest.mark.parametrize(("height", "says"), list(HOSTILE_ROWS.values()), ids=list(HOSTILE_ROWS))
def test_one_bad_report_fails_no_command_through_the_real_cli(tmp_path: Path, height: Any, says: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28: a server-role identity wrote `"height": 1e400`; every booting host then tracebacked (exit 1,
    no env), and so did suggest and stats --traffic."""
    config, fp = _served_config(tmp_path, monkeypatch)
    doc = a_good_report(fp, [96])
    doc["rows"][0]["height"] = height
    key = report_key(fp, since_stamp(0), "ab" * 8, 1)
    FileStore(tmp_path / "store", create=True).put_bytes(key, emit(doc).encode())
    with Catalog.open(f"sqlite:///{tmp_path / 'c.db'}", auto_migrate=True):
        pass

    boot = ck(tmp_path, "hydrate", "--config", str(config), "--dest", str(tmp_path / "d"), "--ready-after", "1",
              "--best-effort", "--print-env")
    assert boot.returncode == 0 and "FAKE_CACHE_DIR=" in boot.stdout and "Traceback" not in boot.stderr, boot.stderr
    hot = [line for line in boot.stderr.splitlines() if line.startswith("warning: hot first")]
    assert len(hot) == 1 and key in hot[0] and "config's priority order" in hot[0], boot.stderr
    for args in (("suggest", str(config)), ("stats", "--traffic", "--catalog", f"sqlite:///{tmp_path / 'c.db'}")):
        proc = ck(tmp_path, *args)
        lines = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        assert lines == [f"warning: report {key}: {says}; skipped"], proc.stderr


def test_a_report_sidecar_given_a_bad_record_reports_the_rest_and_never_crash_loops(tmp_path: Path) -> None:
    """Issue 28: one bad spool record crashed `report`, and its claimed file was taken again each round."""
    (tmp_path / "model").mkdir()
    config = tmp_path / "ck.yaml"
    config.write_text(fake_config(tmp_path / "model"))
    (tmp_path / "store").mkdir()
    spool = tmp_path / "spool"
    spool.mkdir()
    bad = json.loads(a_good_line(96))
    bad["height"] = Raw("1e400")
    (spool / "h-1.jsonl").write_bytes(a_good_line(96) + b"\n" + emit(bad).encode() + b"\n" + a_good_line(64) + b"\n")
    once = ck(tmp_path, "report", "--config", str(config), "--spool", str(spool))
    assert once.returncode == 0 and "Traceback" not in once.stderr, once.stderr
    lines = [line for line in once.stderr.splitlines() if line.startswith("warning:")]
    assert len(lines) == 1 and "h-1.jsonl" in lines[0] and "1 of 3 records skipped (line 2: height" in lines[0]
    assert "report: 2 calls" in once.stderr

    (spool / "h-2.jsonl").write_bytes(emit(bad).encode() + b"\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEKEEPER_")}
    env.update(ENABLE, PYTHONPATH=str(REPO), CACHEKEEPER_HOME=str(tmp_path / "home"),
               CACHEKEEPER_STORE=f"file://{tmp_path / 'store'}")
    sidecar = subprocess.Popen([sys.executable, "-m", "cachekeeper", "report", "--config", str(config), "--spool",
                                str(spool), "--watch", "1"], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    time.sleep(3.5)   # three rounds at least
    assert sidecar.poll() is None, "the sidecar is still running"
    sidecar.send_signal(signal.SIGTERM)
    _, err = sidecar.communicate(timeout=30)
    assert sidecar.returncode == 0 and "Traceback" not in err, err
    assert len([line for line in err.splitlines() if "h-2.jsonl" in line]) == 1, "set aside once, not each round"
    assert sorted(p.name.split(".")[0] for p in spool.iterdir()) == ["h-1", "h-2"]
    assert all(p.name.endswith(BAD) for p in spool.iterdir())


@pytest.mark.parametrize("plant", ["fifo", "dir"])
def test_a_fifo_or_dir_planted_among_a_file_store_s_reports_is_one_line_not_a_hang(
        tmp_path: Path, plant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Anyone with filesystem access to a `file://` store can plant a FIFO where a report is listed: a read
    of it would block forever. The store reads regular files only; the reader skips the object in one line."""
    import os

    config, fp = _served_config(tmp_path, monkeypatch)
    store = FileStore(tmp_path / "store", create=True)
    good = report_key(fp, since_stamp(0), "ab" * 8, 1)
    store.put_bytes(good, emit(a_good_report(fp, [96])).encode())
    planted = tmp_path / "store" / report_key(fp, since_stamp(0), "cd" * 8, 1)
    if plant == "fifo":
        os.mkfifo(planted)
    else:
        planted.mkdir()
    for args in (("suggest", str(config)), ("hydrate", "--config", str(config), "--dest", str(tmp_path / "d"),
                                            "--ready-after", "1", "--best-effort", "--print-env")):
        proc = ck(tmp_path, *args)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        if plant == "fifo":
            lines = [line for line in proc.stderr.splitlines() if "not a regular file" in line]
            assert len(lines) == 1 and lines[0].startswith("warning:"), proc.stderr
