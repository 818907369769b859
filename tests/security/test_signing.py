"""Signed manifests: with trusted keys, hydrate uses only manifests a trusted key signed, byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cachekeeper.admin.gc import plan_gc
from cachekeeper.config.hydrate import HydrateOptions
from cachekeeper.errors import IntegrityError, UsageError
from cachekeeper.format.layout import signature_key
from cachekeeper.format.manifest import Manifest
from cachekeeper.format.signing import PublicKey, SigningKey
from cachekeeper.hydration.engine import Target, hydrate
from cachekeeper.hydration.resolve import Pin
from cachekeeper.publish.upload import publish
from cachekeeper.stores.file import FileStore
from cachekeeper.stores.inventory import scan
from tests.builders import fingerprint, spec, write_tree

pytest.importorskip("cryptography")


@pytest.fixture()
def store(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path / "store")


def _publish(store: FileStore, root: Path, key: SigningKey | None, model: str = "tiny") -> Manifest:
    return publish(store, fingerprint=fingerprint(), spec=spec(model), roots={"cache": root},
                   include=lambda root, rel, path: True, signing_key=key).manifest


def _hydrate(store: FileStore, dest: Path, name: str, trusted: tuple[PublicKey, ...]):  # type: ignore[no-untyped-def]
    return hydrate(Target(fingerprint(), dest, [Pin(name)]), HydrateOptions(trusted_keys=tuple(map(str, trusted))),
                   lambda: store)


def test_a_signed_manifest_hydrates_under_its_trusted_key(store: FileStore, tmp_path: Path) -> None:
    key = SigningKey.generate()
    m = _publish(store, write_tree(tmp_path / "b", {"a.neff": b"1"}), key)
    assert store.exists(signature_key(m.digest))
    report = _hydrate(store, tmp_path / "dest", m.name, (key.public,))
    assert report.files_fetched == 1


def test_an_unsigned_manifest_is_refused_when_keys_are_required(store: FileStore, tmp_path: Path) -> None:
    m = _publish(store, write_tree(tmp_path / "b", {"a.neff": b"1"}), None)
    with pytest.raises(IntegrityError, match="not signed"):
        _hydrate(store, tmp_path / "dest", m.name, (SigningKey.generate().public,))
    assert not (tmp_path / "dest" / "a.neff").exists()


def test_a_manifest_signed_by_another_key_is_refused(store: FileStore, tmp_path: Path) -> None:
    m = _publish(store, write_tree(tmp_path / "b", {"a.neff": b"1"}), SigningKey.generate())
    with pytest.raises(IntegrityError, match="not trusted"):
        _hydrate(store, tmp_path / "dest", m.name, (SigningKey.generate().public,))


def test_a_tampered_manifest_carrying_the_old_signature_is_refused(store: FileStore, tmp_path: Path) -> None:
    key = SigningKey.generate()
    m = _publish(store, write_tree(tmp_path / "b", {"a.neff": b"1"}), key)
    doc = json.loads(store.get_bytes(m.key))
    doc["build"] = {"host": "attacker"}
    forged = Manifest.from_bytes(json.dumps(doc).encode()).to_bytes()
    (store.root / m.key).write_bytes(forged)
    store.put_bytes(signature_key(Manifest.from_bytes(forged).digest), store.get_bytes(signature_key(m.digest)))
    with pytest.raises(IntegrityError, match="invalid signature"):
        _hydrate(store, tmp_path / "dest", m.name, (key.public,))


def test_a_noop_hydrate_still_demands_that_the_manifests_passed_the_keys(store: FileStore, tmp_path: Path) -> None:
    m = _publish(store, write_tree(tmp_path / "b", {"a.neff": b"1"}), None)
    _hydrate(store, tmp_path / "dest", m.name, ())  # placed without checking signatures
    with pytest.raises(IntegrityError, match="not signed"):
        _hydrate(store, tmp_path / "dest", m.name, (SigningKey.generate().public,))


def test_gc_removes_signatures_of_missing_manifests_and_keeps_live_ones(store: FileStore, tmp_path: Path) -> None:
    key = SigningKey.generate()
    m = _publish(store, write_tree(tmp_path / "b", {"a.neff": b"1"}), key)
    store.put_bytes(signature_key("0" * 64), b"{}")
    plan = plan_gc(scan(store), set(), min_age=0)
    assert plan.delete_signatures == [signature_key("0" * 64)]
    dropped = plan_gc(scan(store), {m.fingerprint.id})  # dropping a toolchain takes its signatures at any age
    assert signature_key(m.digest) in dropped.delete_signatures


def test_a_key_round_trips_through_pem_and_its_public_line(tmp_path: Path) -> None:
    key = SigningKey.generate()
    (tmp_path / "k.pem").write_bytes(key.pem())
    again = SigningKey.load(tmp_path / "k.pem")
    assert PublicKey.parse(str(again.public)) == key.public
    # Kubernetes mounts a secret's key file as a symlink (..data/k.pem): followed, as a path to a key should be
    (tmp_path / "mounted.pem").symlink_to(tmp_path / "k.pem")
    assert SigningKey.load(tmp_path / "mounted.pem").public == key.public
    with pytest.raises(UsageError, match="not an ed25519 public key"):
        PublicKey.parse("ed25519:bm90IGEga2V5")
