"""The lockfile is a public format: `lock` pins a config's built entries (with the shared manifests they
require) in exactly these bytes, and `hydrate --lockfile` reads back what was written."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from cachekeeper.backends.host import HostToolchain, host_toolchain
from cachekeeper.config import Config, parse_config
from cachekeeper.errors import NothingToHydrate
from cachekeeper.format.layout import manifest_key
from cachekeeper.hydration.resolve import Locked, Pin, lock_entries, lockfile_store, read_lockfile
from cachekeeper.publish.upload import publish
from cachekeeper.stores.file import FileStore
from tests.builders import write_tree
from tests.fakes import ENABLE, fake_config


@pytest.fixture()
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Config, HostToolchain]:
    """The fake backend's config of two entries (heights 64 and 128) and this host's toolchain for it."""
    for var, value in ENABLE.items():
        monkeypatch.setenv(var, value)
    config = parse_config(fake_config(tmp_path / "model"), source=str(tmp_path / "ck.yaml"))
    return config, host_toolchain(config, "fake")


def test_lock_pins_the_built_entries_and_their_shared_manifest_in_these_bytes(
        tmp_path: Path, fake: tuple[Config, HostToolchain]) -> None:
    config, tc = fake
    store = FileStore(tmp_path / "store")
    first = config.entries({"fake"})[0].spec   # the other entry is never built
    roots = {"cache": write_tree(tmp_path / "cache", {"k.neff": b"kernel"}),
             "shared": write_tree(tmp_path / "shared", {"header.gch": b"header"})}
    entry = publish(store, fingerprint=tc.fingerprint, spec=first, roots=roots, include=tc.backend.include,
                    shared_roots=tc.backend.shared_roots).manifest
    (shared,) = entry.requires   # the stored manifest's sha256 is what a pin binds
    shared_digest = hashlib.sha256(store.get_bytes(manifest_key(tc.fingerprint.id, shared))).hexdigest()

    locked = lock_entries(tmp_path / "ck.lock", config, tc, store)

    assert locked == Locked(pinned=1, not_built=1)
    pins = sorted([(entry.name, entry.digest), (shared, shared_digest)])
    listed = ",\n".join(f'    {{\n      "digest": "{d}",\n      "name": "{n}"\n    }}' for n, d in pins)
    assert (tmp_path / "ck.lock").read_text() == (
        "{\n"
        '  "backend": "fake",\n'
        f'  "fingerprint_id": "{tc.fingerprint.id}",\n'
        f'  "manifests": [\n{listed}\n  ],\n'
        f'  "store": "{store.url}",\n'
        '  "version": 1\n'
        "}\n")
    backend, fp_id, read = read_lockfile(tmp_path / "ck.lock")
    assert (backend, fp_id) == ("fake", tc.fingerprint.id)
    assert {(p.name, p.digest) for p in read} == set(pins) and all(isinstance(p, Pin) for p in read)
    assert lockfile_store(tmp_path / "ck.lock") == store.url


def test_lock_of_a_config_with_nothing_built_writes_nothing(tmp_path: Path,
                                                            fake: tuple[Config, HostToolchain]) -> None:
    config, tc = fake
    store = FileStore(tmp_path / "store")
    with pytest.raises(NothingToHydrate, match=f"no entries of this config for toolchain {tc.fingerprint.id}"):
        lock_entries(tmp_path / "ck.lock", config, tc, store)
    assert not (tmp_path / "ck.lock").exists()
