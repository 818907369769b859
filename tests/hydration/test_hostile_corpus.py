"""A corpus of hostile manifests, objects and destinations, each run through `cachekeeper hydrate`: every
case ends in exactly one `error:` line, one `hint:` line and a documented exit code, never a traceback.

Runs in-process (click's runner) so the whole corpus costs about a second."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from cachekeeper.format.layout import blob_key
from cachekeeper.format.manifest import MAX_MANIFEST_BYTES
from cachekeeper.hydration.destdir import claim_layout, toolchain_dir
from cachekeeper.publish.upload import publish
from cachekeeper.stores.file import FileStore
from tests.fakes import ENABLE

from .helpers import fingerprint, hydrate_into, spec, write_tree

DOCUMENTED_EXIT_CODES = {2, 3, 4, 6, 8, 9, 10, 11}   # docs/cli.md "Exit codes"
FILES = {"a/1.neff": b"one" * 40, "a/2.neff": b"two" * 40, "b/3.neff": b"three"}


@dataclass
class Case:
    tmp: Path
    store: FileStore
    name: str

    @property
    def dest(self) -> Path:
        return self.tmp / "dest"

    @property
    def served(self) -> Path:
        """The toolchain's own dir under the dest, where hydrate places files (hydration/destdir.py)."""
        return toolchain_dir(self.dest, fingerprint().id)

    @property
    def manifest_path(self) -> Path:
        return self.store.root / "manifests" / fingerprint().id / f"{self.name}.json"

    def doc(self, edit: Callable[[dict], object]) -> None:  # type: ignore[type-arg]
        doc = json.loads(self.manifest_path.read_bytes())
        edit(doc)
        self.manifest_path.write_text(json.dumps(doc))

    def text(self, edit: Callable[[str], str]) -> None:
        before = self.manifest_path.read_text()
        after = edit(before)
        assert after != before, "the case did not change the manifest"
        self.manifest_path.write_text(after)

    def first_file(self, **changes: object) -> None:
        self.doc(lambda d: d["files"][0].update(changes))

    def extra_file(self, path: str) -> None:
        """Another record with valid bytes (a copy of the first's) at `path`."""
        self.doc(lambda d: d["files"].append({**d["files"][0], "path": path}))

    def publish(self, files: dict[str, bytes], model: str) -> str:
        root = write_tree(self.tmp / f"build-{model}", files)
        return publish(self.store, fingerprint=fingerprint(), spec=spec(model), roots={"cache": root},
                       include=lambda r, rel, p: True).manifest.name

    def hydrated(self) -> None:
        claim_layout(self.dest, fingerprint().id, "fake", lock_timeout=5)
        hydrate_into(lambda: self.store, self.served, [self.name])


def _nest(depth: int) -> Callable[[Case], None]:
    nested = "[" * depth + "]" * depth
    return lambda c: c.text(lambda t: t.replace('"build":', f'"x": {nested}, "build":'))


def _size_literal(literal: str) -> Callable[[Case], None]:
    """The first size in the manifest becomes a JSON literal Python's parser accepts (the old value kept
    under another key, so nothing else changes)."""
    return lambda c: c.text(lambda t: re.sub(r'"size": ?', f'"size": {literal}, "was": ', t, count=1))


def _replace_pack(c: Case) -> None:
    pack = next(b for b in json.loads(c.manifest_path.read_bytes())["blobs"] if b["packed"])
    (c.store.root / blob_key(pack["digest"])).write_bytes(os.urandom(pack["size"] * 1000))


def _fifo(c: Case) -> None:
    c.hydrated()
    (c.served / "a/1.neff").unlink()
    os.mkfifo(c.served / "a/1.neff")


def _device(c: Case) -> None:
    c.hydrated()
    (c.served / "a/1.neff").unlink()
    try:
        os.mknod(c.served / "a/1.neff", 0o600 | 0o020000, os.makedev(1, 3))
    except PermissionError:
        os.mkfifo(c.served / "a/1.neff")  # unprivileged: the FIFO case again


def _symlinked_parent(c: Case) -> None:
    c.hydrated()
    for p in (c.served / "b").iterdir():
        p.unlink()
    (c.served / "b").rmdir()
    (c.tmp / "elsewhere").mkdir()
    (c.served / "b").symlink_to(c.tmp / "elsewhere")


def _dest_is_a_file(c: Case) -> None:
    c.dest.write_text("a file")


def _substituted(c: Case) -> None:
    other = c.publish({"z.neff": b"z"}, "other")
    c.manifest_path.write_bytes((c.manifest_path.parent / f"{other}.json").read_bytes())


def _nfc_twins(c: Case) -> None:
    c.publish({"caf\u00e9.neff": b"precomposed", "cafe\u0301.neff": b"decomposed"}, "twins")


def _file_dir_across_manifests(c: Case) -> None:
    c.publish({"a/1.neff/inner": b"a directory where tiny has a file"}, "clash")


def _huge_manifest(c: Case) -> None:
    c.text(lambda t: t[:-1] + ', "pad": "' + " " * MAX_MANIFEST_BYTES + '"}')


CORPUS: dict[str, tuple[Callable[[Case], object], str]] = {   # label: (make it hostile, what the error says)
    "unknown root": (lambda c: c.first_file(root="nope"), "which this backend does not have"),
    "deeply nested JSON (recursion)": (_nest(100_000), "nested too deeply"),
    "nested past the depth bound": (_nest(40), "nested deeper than 32"),
    "size 1e999": (_size_literal("1e999"), "out of range"),
    "size NaN": (_size_literal("NaN"), "not a number a manifest may hold"),
    "size 2**62": (lambda c: c.first_file(size=2**62), "is not a size or offset"),
    "size as a string": (lambda c: c.first_file(size="120"), "is not a size or offset"),
    "negative offset": (lambda c: c.first_file(offset=-1), "is not a size or offset"),
    "offset past the pack": (lambda c: c.first_file(offset=10**9), "points outside its blob"),
    "blob digest that is a path": (lambda c: c.first_file(blob="../../../etc/passwd"), "is not a sha256 digest"),
    "path traversal": (lambda c: c.first_file(path="../../outside"), "unsafe path"),
    "absolute path": (lambda c: c.first_file(path="/etc/passwd"), "unsafe path"),
    "name past NAME_MAX": (lambda c: c.first_file(path="a/" + "n" * 300), "longer than the filesystem allows"),
    "path past PATH_MAX": (lambda c: c.first_file(path="/".join(["d" * 250] * 20)), "longer than the filesystem"),
    "path into the state dir (lock)": (lambda c: c.first_file(path=".cachekeeper/lock"), "reserved names"),
    "path onto the state file": (lambda c: c.first_file(path=".cachekeeper/state.json"), "reserved names"),
    "path with the temp suffix": (lambda c: c.first_file(path="a/x.ck-tmp"), "reserved names"),
    "file and dir in one manifest": (lambda c: c.extra_file("a/1.neff/under"), "both a file and a directory"),
    "file and dir across manifests": (_file_dir_across_manifests, "and a directory in"),
    "Unicode normalisation twins": (_nfc_twins, "Unicode normalisation"),
    "pack 1000x its declared size": (_replace_pack, "its manifest declares"),
    "manifest past the size bound": (_huge_manifest, "more than the"),
    "not JSON": (lambda c: c.manifest_path.write_bytes(b"\x00\xffnot json"), "malformed manifest"),
    "a JSON array": (lambda c: c.manifest_path.write_text("[1, 2]"), "not a JSON object"),
    "unknown schema": (lambda c: c.doc(lambda d: d.update(schema=99)), "unknown manifest schema"),
    "another entry's manifest at this key": (_substituted, "(substituted)"),
    "FIFO in dest": (_fifo, "FIFO, socket or device"),
    "device in dest": (_device, "FIFO, socket or device"),
    "symlinked parent in dest": (_symlinked_parent, "escapes"),
    "dest is a file": (_dest_is_a_file, "cannot create directory"),
}


def test_every_hostile_input_ends_in_one_error_line_and_a_documented_exit_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cachekeeper.cli import _register, cli

    _register()
    runner = CliRunner()
    outcomes: dict[str, tuple[int, str]] = {}
    for i, (label, (setup, says)) in enumerate(CORPUS.items()):
        tmp = tmp_path / f"case{i:02d}"
        case = Case(tmp, FileStore(tmp / "store"), "")
        case.name = case.publish(FILES, "tiny")
        setup(case)
        env = {**ENABLE, "FAKE_SHARED_DIR": str(tmp / "shared"), "CACHEKEEPER_HOME": str(tmp / "home")}
        result = runner.invoke(cli, ["hydrate", "--backend", "fake", "--store", f"file://{case.store.root}",
                                     "--dest", str(case.dest), "--deadline", "30"], env=env)
        assert isinstance(result.exception, SystemExit), f"{label}: {result.exception!r}\n{result.stderr}"
        errors = [ln for ln in result.stderr.splitlines() if ln.startswith("error: ")]
        hints = [ln for ln in result.stderr.splitlines() if ln.startswith("hint: ")]
        assert len(errors) == 1 and len(hints) == 1 and "Traceback" not in result.stderr, f"{label}:\n{result.stderr}"
        assert result.exit_code in DOCUMENTED_EXIT_CODES, f"{label}: exit {result.exit_code}: {errors[0]}"
        assert len(errors[0]) < 400, f"{label}: not one short line: {errors[0][:200]}…"
        assert says in errors[0], f"{label}: refused for another reason: {errors[0]}"
        outcomes[label] = (result.exit_code, errors[0])
    assert len(outcomes) == len(CORPUS)
