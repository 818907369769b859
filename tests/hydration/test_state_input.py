"""What earlier runs left on disk is input (issue 28): a lost, corrupt, newer or hostile `state.json`,
`layout.json`, `used/` record, lockfile or capture journal gets its documented recovery (files re-hashed and
adopted) or one `error:` line with its documented exit code; `--best-effort` boots through all of them;
`gc --dest` removes nothing it did not prove is not current; a dest named by its toolchain dir means the
dest. Every case runs through the real CLI against a real file store."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from .disk_state import Host, errors, exported, intact, no_traceback, one_error, warnings


@pytest.fixture()
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Host:
    return Host(tmp_path, monkeypatch)


def _hydrated(host: Host, name: str = "dest") -> Path:
    dest = host.tmp / name
    assert host.hydrate(dest).exit_code == 0
    return dest


def _state(host: Host, dest: Path) -> Path:
    return host.served(dest) / ".cachekeeper" / "state.json"


def _rewrite(path: Path, edit: Callable[[dict], object]) -> None:  # type: ignore[type-arg]
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


STATE_FORMS: dict[str, Callable[[Path], object]] = {
    "lost": lambda p: p.unlink(),
    "not JSON": lambda p: p.write_bytes(b"{{{"),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
    "a newer version": lambda p: _rewrite(p, lambda d: d.update(v=99)),
    "a JSON list": lambda p: p.write_text("[1, 2]"),
    "wrong types": lambda p: _rewrite(p, lambda d: d.update(files={"cache/00/k0.neff": "zz"})),
    "a path leaving its root": lambda p: _rewrite(p, lambda d: d["files"].update({"cache/../../x": ["0" * 64, 1, 1]})),
    "another dir's roots": lambda p: _rewrite(p, lambda d: d["roots"].update(cache="/elsewhere")),
    "another toolchain": lambda p: _rewrite(p, lambda d: d.update(fingerprint_id="0" * 16)),
    "a directory": lambda p: (p.unlink(), p.mkdir()),
    "a FIFO": lambda p: (p.unlink(), os.mkfifo(p)),
    "a symlink": lambda p: (p.unlink(), p.symlink_to("/etc/hostname")),
}


@pytest.mark.parametrize("form", STATE_FORMS)
def test_a_state_file_that_cannot_be_trusted_is_re_verified_and_its_files_adopted(host: Host, form: str) -> None:
    dest = _hydrated(host)
    STATE_FORMS[form](_state(host, dest))
    result = host.hydrate(dest, "--json")
    no_traceback(result)
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    # re-hashed and adopted, nothing fetched again; one warning naming the state file
    assert report["files_verified_local"] == 3 and report["files_fetched"] == 0
    assert [w for w in warnings(result) if "state.json" in w and "re-verified" in w], result.stderr
    assert intact(host.served(dest))
    assert json.loads(host.hydrate(dest, "--json").stdout)["noop"]   # recorded again


def test_a_wrong_file_under_a_lost_state_is_fetched_again_never_adopted(host: Host) -> None:
    dest = _hydrated(host)
    _state(host, dest).unlink()
    (host.served(dest) / "01" / "k1.neff").write_bytes(b"\x09" * 1001)   # same size, other bytes
    assert not intact(host.served(dest))
    result = host.hydrate(dest, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["files_verified_local"] == 2
    assert intact(host.served(dest))


def test_a_state_file_that_cannot_be_replaced_is_one_error_and_best_effort_boots(host: Host) -> None:
    dest = _hydrated(host)
    records = host.served(dest) / ".cachekeeper"
    (records / "state.json").unlink()
    (records / "state.json").mkdir()
    (records / "state.json" / "keep").write_text("a non-empty dir, replaced")
    result = host.hydrate(dest, "--print-env")
    assert result.exit_code == 0 and (records / "state.json").is_file(), result.stderr


@pytest.mark.parametrize(("form", "doc"), [
    ("no current", {"v": 2, "layout": "per-toolchain", "backend": "fake"}),
    ("a path as current", {"v": 2, "layout": "per-toolchain", "current": "../../x", "backend": "fake"}),
    ("a number as current", {"v": 2, "layout": "per-toolchain", "current": 123, "backend": "fake"}),
    ("a current that is not there", {"v": 2, "layout": "per-toolchain", "current": "f" * 16, "backend": "fake"}),
    ("a JSON list", [1, 2]),
    ("not JSON", "{{"),
])
def test_gc_dest_never_removes_a_dir_it_did_not_prove_is_not_current(host: Host, form: str, doc: object) -> None:
    dest = _hydrated(host)
    old = dest / ("e" * 16)                       # an older toolchain's dir: what gc would reclaim
    (old / ".cachekeeper").mkdir(parents=True)
    (old / ".cachekeeper" / "state.json").write_text("{}")
    layout = dest / ".cachekeeper" / "layout.json"
    layout.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    for args in (["--run"], ["--run", "--max-bytes", "1", "--min-age", "0"]):
        result = host.cli("gc", "--dest", str(dest), *args)
        assert "layout.json" in one_error(result, 9)
        assert intact(host.served(dest)) and old.is_dir()
    # hydrate rewrites it (one warning when it was malformed), after which gc proves the current dir and
    # reclaims the old one
    result = host.hydrate(dest, "--print-env")
    assert result.exit_code == 0 and len([w for w in warnings(result) if "layout.json" in w]) == (form != "a current "
                                                                                               "that is not there")
    assert host.cli("gc", "--dest", str(dest), "--run").exit_code == 0
    assert intact(host.served(dest)) and not old.exists()


def test_gc_checks_every_input_before_the_first_deletion(host: Host) -> None:
    dest = _hydrated(host)
    old = dest / ("e" * 16)
    (old / ".cachekeeper").mkdir(parents=True)
    (old / ".cachekeeper" / "state.json").write_text("{}")
    bad = host.tmp / "bad.lock"
    for text in ("nope", "[1, 2]", json.dumps({"version": 1, "backend": "fake", "fingerprint_id": host.fp,
                                               "manifests": [{"name": "../../x", "digest": "0" * 64}]})):
        bad.write_text(text)
        result = host.cli("gc", "--dest", str(dest), "--max-bytes", "1", "--keep-lockfile", str(bad), "--run")
        assert str(bad) in one_error(result, 2) and old.is_dir()
    result = host.cli("gc", "--dest", str(dest), "--dest", str(host.tmp / "nowhere"), "--run")
    assert "nowhere" in one_error(result, 2) and old.is_dir()


@pytest.mark.parametrize("flag", ["--dest", "--node-cache"])
def test_gc_of_a_path_that_does_not_exist_is_one_usage_error(host: Host, flag: str) -> None:
    result = host.cli("gc", flag, str(host.tmp / "nope"), "--max-bytes", "1G")
    assert one_error(result, 2) == f"error: gc {flag} {host.tmp / 'nope'}: no such directory"


def test_gc_evicts_only_inside_the_dest_whatever_the_state_file_names(host: Host) -> None:
    dest = _hydrated(host)
    victim = host.tmp / "victim" / "00" / "k0.neff"
    victim.parent.mkdir(parents=True)
    victim.write_bytes(b"the operator's")
    state = _state(host, dest)
    _rewrite(state, lambda d: d["roots"].update(cache=str(host.tmp / "victim")))
    used = host.served(dest) / ".cachekeeper" / "used"
    for record in used.iterdir():
        os.utime(record, (1, 1))
    no_traceback(host.cli("gc", "--dest", str(dest), "--max-bytes", "1", "--min-age", "0", "--run"))
    assert victim.read_bytes() == b"the operator's"


@pytest.mark.parametrize("record", [b"{{", b"[[1]]", b'{"a": 1}', b"[1, 2]", b'["../../../x"]'])
def test_a_bad_usage_record_never_stops_gc_or_hydrate(host: Host, record: bytes) -> None:
    dest = _hydrated(host)
    for path in (host.served(dest) / ".cachekeeper" / "used").iterdir():
        path.write_bytes(record)
        os.utime(path, (1, 1))
    no_traceback(host.cli("gc", "--dest", str(dest), "--max-bytes", "1", "--min-age", "0", "--run"))
    result = host.hydrate(dest, "--max-bytes", "1", "--best-effort", "--print-env")
    assert result.exit_code == 0 and exported(result)
    assert intact(host.served(dest))


@pytest.mark.parametrize("text", ["[1, 2]", "{{", '{"version": 1}', '{"version": true, "manifests": []}',
                                  json.dumps({"version": 1, "backend": "fake", "fingerprint_id": "../x",
                                              "manifests": []}),
                                  json.dumps({"version": 1, "backend": "fake", "fingerprint_id": "0" * 16,
                                              "manifests": [{"name": 1, "digest": None}]})])
def test_a_malformed_lockfile_is_one_error_line_naming_it(host: Host, text: str) -> None:
    lock = host.tmp / "ck.lock"
    lock.write_text(text)
    result = host.cli("hydrate", "--lockfile", str(lock), "--dest", str(host.tmp / "d"), "--best-effort")
    assert str(lock) in one_error(result, 2)   # which backend's env to print, it cannot say
    result = host.cli("hydrate", "--lockfile", str(lock), "--backend", "fake", "--dest", str(host.tmp / "d"),
                      "--best-effort", "--print-env")
    assert result.exit_code == 0 and exported(result) == {"FAKE_CACHE_DIR": str(host.served(host.tmp / "d"))}
    assert len(warnings(result)) == 1 and str(lock) in warnings(result)[0]


def test_a_layout_of_a_newer_release_is_one_error_and_best_effort_boots_with_the_env(host: Host) -> None:
    dest = _hydrated(host)
    _rewrite(dest / ".cachekeeper" / "layout.json", lambda d: d.update(v=3))
    assert "layout version 3" in one_error(host.hydrate(dest, "--print-env"), 9)
    result = host.hydrate(dest, "--best-effort", "--print-env")
    assert result.exit_code == 0 and exported(result) == {"FAKE_CACHE_DIR": str(host.served(dest))}
    assert len(warnings(result)) == 1 and "layout version 3" in warnings(result)[0]


def test_best_effort_boots_past_a_held_dest_lock_with_one_warning(host: Host) -> None:
    dest = _hydrated(host)
    code = (f"import fcntl, time; f = open({str(dest / '.cachekeeper' / 'lock')!r}, 'a'); "
            "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert "is locked by another process" in one_error(host.hydrate(dest, "--deadline", "1"), 10)
        result = host.hydrate(dest, "--deadline", "1", "--best-effort", "--print-env")
        assert result.exit_code == 0 and exported(result) == {"FAKE_CACHE_DIR": str(host.served(dest))}
        assert len(warnings(result)) == 1 and "locked by another process" in warnings(result)[0]
    finally:
        holder.kill()
        holder.wait()
    assert fcntl  # the holder takes the same flock the CLI does


# --- paths mean one thing ---------------------------------------------------------------------------


def test_every_command_given_the_toolchain_dir_works_on_its_dest(host: Host) -> None:
    dest = _hydrated(host)
    served = host.served(dest)
    result = host.hydrate(served, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["dest"] == str(served)
    assert json.loads(result.stdout)["noop"] and not (served / host.fp).exists()
    for args in (["env", "--dest", str(served)], ["env", "--config", str(host.config), "--dest", str(served)]):
        assert exported(host.cli(*args)) == {"FAKE_CACHE_DIR": str(served)}   # backend from layout.json
    (served / "new").mkdir()
    (served / "new" / "graph.neff").write_bytes(b"compiled")
    os.utime(served / "new" / "graph.neff", (1, 1))
    result = host.cli("capture", "--dest", str(served), "--settle", "0")
    assert result.exit_code == 0 and result.stdout.splitlines() == ["new/graph.neff"], result.stderr
    result = host.cli("report", "--dest", str(served), "--spool", str(host.tmp / "spool"))
    assert result.exit_code == 0, result.stderr                              # backend from layout.json
    assert host.cli("gc", "--dest", str(served), "--max-bytes", "1G", "--run").exit_code == 0
    assert intact(served)


@pytest.mark.parametrize("inside", [".cachekeeper", "{fp}/.cachekeeper", "{fp}/00", "{fp}/.cachekeeper/used"])
def test_a_path_inside_a_dest_is_refused_by_every_command(host: Host, inside: str) -> None:
    dest = _hydrated(host)
    path = str(dest / inside.format(fp=host.fp))
    for args in (["hydrate", "--config", str(host.config), "--dest", path], ["env", "--dest", path],
                 ["capture", "--dest", path], ["gc", "--dest", path], ["report", "--dest", path]):
        assert one_error(host.cli(*args), 9).startswith(f"error: {path} is inside"), args
    assert intact(host.served(dest))


def test_capture_never_lists_cachekeeper_records_at_any_depth(host: Host) -> None:
    dest = _hydrated(host)
    served = host.served(dest)
    for rel in ("sub/.cachekeeper/state.json", "a/b/.cachekeeper/used/x.json", "new/graph.neff"):
        (served / rel).parent.mkdir(parents=True, exist_ok=True)
        (served / rel).write_text("{}")
        os.utime(served / rel, (1, 1))
    result = host.cli("capture", "--dest", str(dest), "--settle", "0")
    assert result.exit_code == 0 and result.stdout.splitlines() == ["new/graph.neff"], result.stderr


@pytest.mark.parametrize("where", ["inside", "holding"])
def test_a_node_cache_that_overlaps_the_dest_is_refused(host: Host, where: str) -> None:
    dest = host.tmp / "dest"
    node = dest / "node" if where == "inside" else host.tmp
    result = host.hydrate(dest, "--node-cache", str(node), "--best-effort")
    assert "must not overlap" in one_error(result, 9)
    assert not host.served(dest).exists()


@pytest.mark.parametrize("journal", [b"[1, 2]", b'{"v": 1, "published": []}', b'{"v": 1, "published": {"a": "x"}}',
                                     b"{{", b'{"v": 1, "published": {}, "pending": 5, "last_error": 7}'])
def test_a_corrupt_capture_journal_means_capture_everything_again(host: Host, journal: bytes) -> None:
    dest = _hydrated(host)
    served = host.served(dest)
    (served / "new.neff").write_bytes(b"compiled")
    os.utime(served / "new.neff", (1, 1))
    (served / ".cachekeeper" / "capture.json").write_bytes(journal)
    result = host.cli("capture", "--dest", str(dest), "--settle", "0")
    assert result.exit_code == 0 and result.stdout.splitlines() == ["new.neff"], result.stderr
    assert not errors(result)
