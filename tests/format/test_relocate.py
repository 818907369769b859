"""Relocatable files (format/relocate.py): the build's root out at snapshot, the served dir in at hydrate,
length for length, so pickles (and pickles inside pickles) stay valid and nothing outside the marked files
is rewritten. The manifest side: a record's `relocate` and schema 3."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import subprocess
from pathlib import Path

import pytest

from cachekeeper.errors import DestinationError, ManifestError
from cachekeeper.format import relocate
from cachekeeper.format.manifest import (
    KIND_CAPTURED,
    SCHEMA,
    SCHEMA_RELOCATED,
    FileRecord,
    Manifest,
)
from cachekeeper.fs.atomic import AtomicFile
from tests.builders import fingerprint, spec

LENGTH = relocate.RESERVED


def build_root(tmp_path: Path) -> Path:
    """A build root padded to RESERVED bytes, as InductorBackend.build_roots makes it."""
    base = tmp_path / "ck-build-x"
    root = base / ("cache" + "_" * (LENGTH - len(str(base)) - 6))
    assert len(str(root)) == LENGTH
    root.mkdir(parents=True)
    return root


def autotuner_entry(root: Path) -> bytes:
    """Shaped as an FX-graph entry carrying a pickled static autotuner: the autotuner's state keeps the
    kernel's absolute `filename` (torch 2.14.1 runtime/triton_heuristics.py:1200-1207, `__getstate__` keeps
    `__dict__`; codegen/triton.py:7391 passes `filename=__file__`), and the bundle holds it as pickled bytes
    inside the outer pickle (triton_bundler.py `StaticallyLaunchedAutotuner`)."""
    inner = pickle.dumps({"filename": f"{root}/ab/cabc.py", "local_cache": f"{root}/ab/0f.best_config",
                          "configs": [{"XBLOCK": 64}, {"XBLOCK": 128}]})
    return pickle.dumps({"cache_key": "fabc", "static_autotuners": [inner], "repro": f"CACHE_DIR = '{root}'"})


# --- lengths and the placeholder --------------------------------------------------------------------------


def test_a_placeholder_is_as_long_as_the_path_it_stands_for_and_no_real_path() -> None:
    stand_in = relocate.placeholder(LENGTH)
    assert len(stand_in) == LENGTH and stand_in.startswith(relocate.STEM)
    assert stand_in.count(b"/") == 1   # no occurrence can straddle a replaced one (local_record relies on it)
    for bad in (0, relocate.MIN_LENGTH - 1, relocate.MAX_LENGTH + 1):
        with pytest.raises(ValueError):
            relocate.placeholder(bad)


def test_the_served_root_is_padded_with_slashes_and_a_longer_one_is_refused() -> None:
    assert relocate.served("/srv/ck/0123", 20) == b"/srv/ck/0123////////"
    assert os.path.normpath(relocate.served("/srv/ck/0123", 20).decode() + "/ab/c.py") == "/srv/ck/0123/ab/c.py"
    with pytest.raises(DestinationError, match="reserve 20"):
        relocate.served("/srv/" + "x" * 40, 20)


def test_a_different_length_path_would_corrupt_the_pickles(tmp_path: Path) -> None:
    # Why the substitution keeps lengths: pickles store strings with their length in front.
    root = build_root(tmp_path)
    data = autotuner_entry(root)
    naive = data.replace(os.fsencode(str(root)), b"/srv/ck/0123")
    with pytest.raises(Exception):  # noqa: B017 - any unpickling failure will do
        inner = pickle.loads(naive)["static_autotuners"][0]
        assert pickle.loads(inner)["filename"].startswith("/srv/ck/0123/")


# --- snapshot side: which files are marked ----------------------------------------------------------------


def test_snapshot_marks_a_nested_pickle_and_hydrate_restores_valid_pickles_naming_the_served_dir(
        tmp_path: Path) -> None:
    root = build_root(tmp_path)
    entry = root / "fxgraph" / "fabc" / "entry"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(autotuner_entry(root))
    size = entry.stat().st_size
    assert relocate.mark_file(entry, os.fsencode(str(root))) == "relocate"
    published = entry.read_bytes()
    assert os.fsencode(str(root)) not in published and relocate.placeholder(LENGTH) in published
    assert len(published) == size
    assert relocate.mark_file(entry, os.fsencode(str(root))) == "relocate"   # a second snapshot: still marked
    assert entry.read_bytes() == published
    served = tmp_path / "srv" / "0123456789abcdef"
    (served / "ab").mkdir(parents=True)
    (served / "ab" / "0f.best_config").write_text("{}")
    (served / "fxgraph").mkdir()
    out = AtomicFile(served / "fxgraph" / "entry", writeback=False)
    out.write(published)
    rec = FileRecord("cache", "fxgraph/entry", len(published), hashlib.sha256(published).hexdigest(), "0" * 64,
                     relocate=LENGTH)
    placed = relocate.commit(rec, served / "fxgraph" / "entry", out, rec.sha256)
    assert placed is not None
    out.commit(fsync=False)
    data = (served / "fxgraph" / "entry").read_bytes()
    assert placed.sha256 == hashlib.sha256(data).hexdigest() != rec.sha256
    state = pickle.loads(pickle.loads(data)["static_autotuners"][0])
    assert os.path.normpath(state["filename"]) == f"{served}/ab/cabc.py"
    # the .best_config lookup path (autotune_cache.py:136-137: dirname(filename)) finds the shipped file
    assert os.path.exists(os.path.join(os.path.dirname(state["filename"]), "0f.best_config"))
    assert os.path.exists(state["local_cache"])


def test_a_triton_group_file_lists_child_paths_that_exist_where_it_is_served(tmp_path: Path) -> None:
    # triton 3.6 runtime/cache.py:91-95 (put_group writes {"child_paths": {name: absolute path}}) and
    # :73-88 (get_group keeps only the paths that exist; compiler.py:262-266 counts a hit only then).
    root = build_root(tmp_path)
    kdir = root / "triton" / "0" / "HASH"
    kdir.mkdir(parents=True)
    for name in ("k.cubin", "k.json"):
        (kdir / name).write_bytes(b"x")
    grp = kdir / "__grp__k.json"
    grp.write_text(json.dumps({"child_paths": {n: str(kdir / n) for n in ("k.cubin", "k.json")}}))
    assert relocate.mark_file(grp, os.fsencode(str(root))) == "relocate"
    served = tmp_path / "d" / "fp"
    shutil.copytree(root, served)
    shutil.rmtree(root.parent)   # the build dir is gone
    target = served / "triton" / "0" / "HASH" / "__grp__k.json"
    published = target.read_bytes()
    rec = FileRecord("cache", "triton/0/HASH/__grp__k.json", len(published), hashlib.sha256(published).hexdigest(),
                     "0" * 64, relocate=LENGTH)
    out = AtomicFile(target, writeback=False)
    out.write(target.read_bytes())
    assert relocate.commit(rec, target, out, rec.sha256) is not None
    out.commit(fsync=False)
    children = json.loads(target.read_text())["child_paths"]
    assert all(os.path.exists(p) for p in children.values()) and len(children) == 2


def _compile(tmp_path: Path, root: Path, name: str, source: str) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    src = root / f"{name}.c"
    src.write_text(source)
    out = root / f"{name}.so"
    subprocess.run(["gcc", "-g", "-O1", "-shared", "-fPIC", str(src), "-o", str(out)], check=True, cwd=root)
    return out


def test_an_elf_object_naming_the_root_only_in_debug_info_is_left_as_built(tmp_path: Path) -> None:
    root = build_root(tmp_path)
    so = _compile(tmp_path, root, "kernel", "int kernel(int x) { return x * 2; }\n")
    before = so.read_bytes()
    assert os.fsencode(str(root)) in before              # DW_AT_comp_dir / the line table name it
    assert relocate.mark_file(so, os.fsencode(str(root))) == "debug"
    assert so.read_bytes() == before


def test_an_elf_object_naming_the_root_in_loaded_data_is_marked(tmp_path: Path) -> None:
    root = build_root(tmp_path)
    so = _compile(tmp_path, root, "named", f'const char *where = "{root}/data";\n'
                                           "const char *get(void) { return where; }\n")
    assert relocate.mark_file(so, os.fsencode(str(root))) == "relocate"


def test_a_gcc_precompiled_header_is_left_as_built() -> None:
    data = b"gpch.013" + b"\0" * 16 + b"/build/dir/x.h" + b"\0" * 8
    assert relocate.classify(data, b"/build/dir") == "debug"
    assert relocate.classify(b"plain /build/dir text", b"/build/dir") == "relocate"
    assert relocate.classify(b"nothing here", b"/build/dir") == "none"
    assert relocate.elf_loaded_ranges(b"\x7fELF\x09garbage") is None   # unparsable: every occurrence counts


# --- hydrate side: found files, copies ---------------------------------------------------------------------


def _served_copy(tmp_path: Path, published: bytes, rel: str = "x/f.json") -> tuple[FileRecord, Path]:
    target = tmp_path / "dest" / "fp0" / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    rec = FileRecord("cache", rel, len(published), hashlib.sha256(published).hexdigest(), "0" * 64,
                     relocate=LENGTH)
    out = AtomicFile(target, writeback=False)
    out.write(published)
    placed = relocate.commit(rec, target, out, rec.sha256)
    assert placed is not None
    out.commit(fsync=False)
    return rec, target


def test_a_found_file_is_adopted_only_as_the_published_bytes_rewritten_for_this_dir(tmp_path: Path) -> None:
    published = b'{"p": "' + relocate.placeholder(LENGTH) + b'/ab/c.py"}'
    rec, target = _served_copy(tmp_path, published)
    found = relocate.local_record(rec, target)
    assert found is not None and found.sha256 == hashlib.sha256(target.read_bytes()).hexdigest()
    good = target.read_bytes()
    for bad in (published,                                               # never rewritten
                good.replace(b"/ab/", b"/ac/"),                          # changed after
                good + relocate.placeholder(LENGTH)):                    # a placeholder of its own
        target.write_bytes(bad)
        assert relocate.local_record(rec, target) is None


def test_a_copy_of_a_rewritten_file_is_right_in_the_same_root_only(tmp_path: Path) -> None:
    published = b"x=" + relocate.placeholder(LENGTH)
    rec, target = _served_copy(tmp_path, published)
    rewritten = target.read_bytes()
    twin = target.parent / "twin"
    out = AtomicFile(twin, writeback=False)
    out.write(rewritten)
    same = relocate.commit(FileRecord(**{**rec.__dict__, "path": "x/twin"}), twin, out,
                           hashlib.sha256(rewritten).hexdigest())
    assert same is not None and same.sha256 == hashlib.sha256(rewritten).hexdigest()
    out.abort()
    other = tmp_path / "elsewhere" / "x" / "twin"
    other.parent.mkdir(parents=True)
    out = AtomicFile(other, writeback=False)
    out.write(rewritten)
    assert relocate.commit(FileRecord(**{**rec.__dict__, "path": "x/twin"}), other, out,
                           hashlib.sha256(rewritten).hexdigest()) is None
    out.abort()


def test_an_informative_record_names_roots_by_name() -> None:
    build = {"result": {"aot_dir": "/w/ck-build-1/cache___/ck-aot/k", "n": 1, "l": ["/w/ck-build-1/tmp/x"]}}
    roots = {"cache": Path("/w/ck-build-1/cache___"), "pch": Path("/w/ck-build-1/tmp")}
    assert relocate.scrub(build, roots) == {"result": {"aot_dir": "${cache}/ck-aot/k", "n": 1,
                                                       "l": ["${pch}/x"]}}


# --- the manifest: `relocate` per file, schema 3 -----------------------------------------------------------


def _manifest(relocate_len: int = 0, kind: str = "entry") -> Manifest:
    data = b"abc"
    sha = hashlib.sha256(data).hexdigest()
    files = (FileRecord("cache", "a", 3, sha, sha, 0, relocate_len),)
    from cachekeeper.format.manifest import BlobRecord

    s = spec() if kind == "entry" else None
    return Manifest(kind, s.key if s else "captured/0123456789abcdef", fingerprint(), files,
                    (BlobRecord(sha, 3, packed=False),), spec=s)


def test_a_manifest_with_relocatable_files_is_schema_3_and_round_trips() -> None:
    plain, moved = _manifest(), _manifest(LENGTH)
    assert plain.to_dict()["schema"] == SCHEMA and "relocate" not in plain.to_dict()["files"][0]
    assert moved.to_dict()["schema"] == SCHEMA_RELOCATED and moved.to_dict()["files"][0]["relocate"] == LENGTH
    again = Manifest.from_bytes(moved.to_bytes())
    assert again.files[0].relocate == LENGTH and again.digest == moved.digest


@pytest.mark.parametrize("value", [0, -1, 5, relocate.MAX_LENGTH + 1, 2 ** 70, True, "200", 200.0, None])
def test_a_relocate_field_that_is_not_a_path_length_is_refused(value: object) -> None:
    d = _manifest(LENGTH).to_dict()
    d["files"][0]["relocate"] = value
    with pytest.raises(ManifestError, match=r"relocatable path length|malformed"):
        Manifest.from_bytes(json.dumps(d).encode())


def test_schema_and_relocatable_files_must_agree() -> None:
    d = _manifest(LENGTH).to_dict()
    d["schema"] = SCHEMA
    with pytest.raises(ManifestError, match="does not belong to schema 1 with relocatable files"):
        Manifest.from_bytes(json.dumps(d).encode())
    d = _manifest().to_dict()
    d["schema"] = SCHEMA_RELOCATED
    with pytest.raises(ManifestError, match="does not belong to schema 3"):
        Manifest.from_bytes(json.dumps(d).encode())
    with pytest.raises(ManifestError, match="no relocatable files"):
        _manifest(LENGTH, KIND_CAPTURED).validate()


def test_a_newer_schema_says_to_upgrade() -> None:
    d = _manifest().to_dict()
    d["schema"] = 4
    with pytest.raises(ManifestError, match=r"unknown manifest schema 4 \(this cachekeeper reads 1, 2, 3: upgrade"):
        Manifest.from_bytes(json.dumps(d).encode())
