"""Property: whatever an earlier run (or a serving host) left in a dest's records, a node cache or a lockfile
(corrupt, truncated, of another version, another type, a directory, a symlink, a FIFO, gone), `hydrate
--best-effort` boots with the env, `gc --dest` never removes the live toolchain dir (nor, with a kept
lockfile, any of its files) nor anything outside the dest, and no command ends in a traceback or an
undocumented exit code (issue 28). Examples run in-process; the counts are kept moderate for 2 cores."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cachekeeper.captures.capture import Journal, save_journal

from .disk_state import FILES, Host, exported, intact, no_traceback

TARGETS = {   # what to corrupt, relative to one example's dir ({fp}: this host's toolchain)
    "layout.json": "dest/.cachekeeper/layout.json",
    "state.json": "dest/{fp}/.cachekeeper/state.json",
    "used record": "dest/{fp}/.cachekeeper/used/*.json",
    "capture.json": "dest/{fp}/.cachekeeper/capture.json",
    "dest lock": "dest/.cachekeeper/lock",
    "toolchain lock": "dest/{fp}/.cachekeeper/lock",
    "toolchain records": "dest/{fp}/.cachekeeper",
    "dest records": "dest/.cachekeeper",
    "old toolchain's state": "dest/eeeeeeeeeeeeeeee/.cachekeeper/state.json",
    "lockfile": "ck.lock",
    "node marker": "node/NODE-CACHE",
    "node record": "node/objects/*/*.ok",
    "node object": "node/objects/*/[0-9a-f]*[0-9a-f]",
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=20)
    | st.sampled_from(["../../x", "/etc", "eeeeeeeeeeeeeeee", "0" * 64]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12)
KEYS = st.sampled_from(["v", "version", "current", "backend", "files", "roots", "manifests", "fingerprint_id",
                        "published", "pending", "durability", "boot_id", "filesystem", "signed", "captured_seen"])
corruptions = st.one_of(
    st.tuples(st.just("delete")),
    st.tuples(st.just("truncate"), st.integers(0, 400)),
    st.tuples(st.just("bytes"), st.binary(max_size=300)),
    st.tuples(st.just("json"), json_values),
    st.tuples(st.just("field"), KEYS, json_values),
    st.tuples(st.just("dir")),
    st.tuples(st.just("symlink")),
    st.tuples(st.just("fifo")),
)


def corrupt(path: Path, how: tuple[Any, ...], victim: Path) -> None:
    kind = how[0]
    if kind == "field":
        try:   # an earlier step may have left a FIFO here: never block the test on it
            doc = json.loads(path.read_bytes()) if path.is_file() else {}
        except (OSError, ValueError):
            doc = {}
        doc = doc if isinstance(doc, dict) else {}
        doc[how[1]] = how[2]
        data = json.dumps(doc).encode()
    elif kind == "json":
        data = json.dumps(how[1]).encode()
    elif kind == "truncate":
        data = path.read_bytes()[: how[1]] if path.is_file() else b""
    else:
        data = how[1] if kind == "bytes" else b""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return   # an earlier corruption made a file or a link of its dir
    if kind == "dir":
        (path / "inside").mkdir(parents=True)
    elif kind == "symlink":
        path.symlink_to(victim)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind != "delete":
        path.write_bytes(data)


@pytest.fixture()
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Host:
    return Host(tmp_path, monkeypatch)


def _example(host: Host, n: int) -> Path:
    """One example's dir: a dest hydrated through a node cache, an older toolchain's dir beside it, a
    capture journal, a runtime compile, a lockfile and a file outside it all that nothing may touch."""
    ex = host.tmp / f"ex{n}"
    ex.mkdir()
    (ex / "victim").write_bytes(b"not cachekeeper's")
    result = host.hydrate(ex / "dest", "--node-cache", str(ex / "node"))
    assert result.exit_code == 0, result.stderr
    served = host.served(ex / "dest")
    old = ex / "dest" / ("e" * 16)
    shutil.copytree(served, old)
    save_journal(served, Journal(published={"cache/older.neff": (1, 1)}))
    (served / "new.neff").write_bytes(b"compiled at runtime")
    os.utime(served / "new.neff", (1, 1))
    (ex / "ck.lock").write_text(json.dumps({"version": 1, "backend": "fake", "fingerprint_id": host.fp, "manifests": [
        {"name": host.manifest.name, "digest": host.manifest.digest}]}))
    return ex


def _targets(ex: Path, fp: str, name: str) -> list[Path]:
    pattern = TARGETS[name].format(fp=fp)
    found = sorted(ex.glob(pattern)) if "*" in pattern else [ex / pattern]
    return found[:1] or [ex / pattern.replace("*", "x")]


def _no_wrong_bytes(served: Path) -> bool:
    """Every published file that is in the served dir holds its published bytes (a miss is allowed, a
    wrong artifact never)."""
    return all(hashlib.sha256((served / rel).read_bytes()).digest() == hashlib.sha256(data).digest()
               for rel, data in FILES.items() if (served / rel).is_file() and not (served / rel).is_symlink())


COMMANDS = ["hydrate", "hydrate --lockfile", "gc --dest", "gc --dest --max-bytes", "capture", "env", "report",
            "gc --node-cache"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(damage=st.lists(st.tuples(st.sampled_from(sorted(TARGETS)), corruptions), min_size=1, max_size=3),
       command=st.sampled_from(COMMANDS))
def test_nothing_left_on_disk_stops_a_boot_or_leads_gc_to_the_live_dir(
        host: Host, damage: list[tuple[str, tuple[Any, ...]]], command: str) -> None:
    ex = _example(host, next(_counter))
    dest, served, victim = ex / "dest", host.served(ex / "dest"), ex / "victim"
    for name, how in damage:
        for path in _targets(ex, host.fp, name):
            corrupt(path, how, victim)
    lock, node = str(ex / "ck.lock"), str(ex / "node")
    args = {
        "hydrate": ["hydrate", "--config", str(host.config), "--dest", str(dest), "--node-cache", node,
                    "--best-effort", "--print-env"],
        "hydrate --lockfile": ["hydrate", "--lockfile", lock, "--backend", "fake", "--dest", str(dest),
                               "--node-cache", node, "--best-effort", "--print-env"],
        "gc --dest": ["gc", "--dest", str(dest), "--run"],
        "gc --dest --max-bytes": ["gc", "--dest", str(dest), "--max-bytes", "1", "--keep-lockfile", lock, "--run"],
        "capture": ["capture", "--dest", str(dest), "--settle", "0"],
        "env": ["env", "--dest", str(dest)],
        "report": ["report", "--dest", str(dest), "--spool", str(ex / "spool")],
        "gc --node-cache": ["gc", "--node-cache", node, "--max-bytes", "1", "--run"],
    }[command]
    result = host.cli(*args)
    no_traceback(result)
    assert victim.read_bytes() == b"not cachekeeper's"
    if command.startswith("hydrate"):
        assert result.exit_code == 0, result.stderr
        assert exported(result) == {"FAKE_CACHE_DIR": str(served)}
        assert _no_wrong_bytes(served)
    if command.startswith("gc --dest"):
        assert served.is_dir() and intact(served), result.stderr   # the live dir, whole
    if command == "capture" and result.exit_code == 0:
        assert not [ln for ln in result.stdout.splitlines() if ".cachekeeper" in ln.split("/")]
    if command == "env" and result.exit_code == 0:
        assert exported(result) == {"FAKE_CACHE_DIR": str(served)}


_counter = itertools.count()
