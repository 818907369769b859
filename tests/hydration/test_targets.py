"""What hydrate may write, and where: only the manifest it asked for, never into its own state dir,
never through or onto a symlink, a FIFO or a device, and path conflicts refused before any fetch."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cachekeeper.errors import DestinationError, IntegrityError, ManifestError, UnsafePath
from cachekeeper.format.signing import SigningKey
from cachekeeper.publish.upload import publish
from cachekeeper.stores.base import Body
from cachekeeper.stores.file import FileStore

from .helpers import fingerprint, hydrate_into, read_tree, spec, write_tree

FILES = {"a/1.neff": b"one" * 50, "a/2.neff": b"two" * 50}


class CountingStore(FileStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.blob_reads = 0

    def open_range(self, key: str, start: int, end: int | None, read_timeout: float,
                   connect_timeout: float) -> Body:
        self.blob_reads += key.startswith("blobs/")
        return super().open_range(key, start, end, read_timeout, connect_timeout)


def _publish(store: FileStore, tmp: Path, files: dict[str, bytes], model: str = "tiny",
             key: SigningKey | None = None) -> str:
    root = write_tree(tmp / f"build-{model}", files)
    return publish(store, fingerprint=fingerprint(), spec=spec(model), roots={"cache": root},
                   include=lambda r, rel, p: True, signing_key=key).manifest.name


def _rewrite(store: FileStore, name: str, edit: object) -> None:
    path = store.root / "manifests" / fingerprint().id / f"{name}.json"
    doc = json.loads(path.read_bytes())
    edit(doc)  # type: ignore[operator]
    path.write_bytes(json.dumps(doc).encode())


def test_a_validly_signed_manifest_of_another_entry_at_this_key_is_refused(tmp_path: Path) -> None:
    key = SigningKey.generate()
    store = CountingStore(tmp_path / "store")
    a = _publish(store, tmp_path, FILES, "tiny", key)
    b = _publish(store, tmp_path, {"evil.neff": b"not a's bytes"}, "other", key)
    where = store.root / "manifests" / fingerprint().id
    (where / f"{a}.json").write_bytes((where / f"{b}.json").read_bytes())  # signed, valid, and not a
    with pytest.raises(IntegrityError, match=f"holds manifest {b}, not {a}"):
        hydrate_into(lambda: store, tmp_path / "d", [a], trusted_keys=(str(key.public),))
    assert read_tree(tmp_path / "d") == {} and store.blob_reads == 0


@pytest.mark.parametrize("path", [".cachekeeper/lock", ".cachekeeper/state.json", "a/.x.ck-tmp"])
def test_no_manifest_path_lands_in_the_state_dir_or_carries_the_temp_suffix(path: str, tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    name = _publish(store, tmp_path, FILES)
    dest = tmp_path / "d"
    hydrate_into(lambda: store, dest, [name])
    state = (dest / ".cachekeeper" / "state.json").read_bytes()
    _rewrite(store, name, lambda doc: doc["files"][0].update(path=path))
    with pytest.raises(UnsafePath, match="reserved"):
        hydrate_into(lambda: store, dest, [name], verify=True)
    assert (dest / ".cachekeeper" / "state.json").read_bytes() == state


def test_a_symlink_leaf_to_a_file_outside_is_replaced_never_adopted(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    name = _publish(store, tmp_path, FILES)
    dest = tmp_path / "d"
    hydrate_into(lambda: store, dest, [name])
    outside = tmp_path / "outside.neff"
    outside.write_bytes(FILES["a/1.neff"])  # the right bytes, somewhere else
    (dest / "a/1.neff").unlink()
    (dest / "a/1.neff").symlink_to(outside)
    report = hydrate_into(lambda: store, dest, [name])
    assert not (dest / "a/1.neff").is_symlink() and (dest / "a/1.neff").read_bytes() == FILES["a/1.neff"]
    assert report.files_fetched == 1 and outside.read_bytes() == FILES["a/1.neff"]


def test_a_symlinked_parent_is_never_written_through(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    name = _publish(store, tmp_path, FILES)
    dest = tmp_path / "d"
    hydrate_into(lambda: store, dest, [name])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for p in (dest / "a").iterdir():
        p.unlink()
    (dest / "a").rmdir()
    (dest / "a").symlink_to(elsewhere)
    with pytest.raises(UnsafePath, match="symlink"):
        hydrate_into(lambda: store, dest, [name])
    assert list(elsewhere.iterdir()) == []


def test_a_file_and_a_dir_at_one_path_across_manifests_is_refused_while_planning(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "store")
    a = _publish(store, tmp_path, {"x": b"a file"}, "m1")
    b = _publish(store, tmp_path, {"x/y": b"under a dir"}, "m2")
    for order in ([a, b], [b, a]):
        with pytest.raises(ManifestError, match=r"is a file in manifest .* and a directory in"):
            hydrate_into(lambda: store, tmp_path / f"d{order[0][:4]}", order)
    assert store.blob_reads == 0


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_fifo_or_device_where_a_file_goes_is_refused_not_opened(kind: str, tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store")
    name = _publish(store, tmp_path, FILES)
    dest = tmp_path / "d"
    hydrate_into(lambda: store, dest, [name])
    (dest / "a/1.neff").unlink()
    try:
        if kind == "fifo":
            os.mkfifo(dest / "a/1.neff")
        else:
            os.mknod(dest / "a/1.neff", 0o600 | 0o020000, os.makedev(1, 3))  # a char device (/dev/null's)
    except PermissionError:
        pytest.skip(f"cannot create a {kind} here")
    with pytest.raises(DestinationError, match="FIFO, socket or device"):
        hydrate_into(lambda: store, dest, [name])
