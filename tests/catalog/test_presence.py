"""Presence: one answer to "what is built for this toolchain?", from the catalog or from the store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cachekeeper.catalog import Catalog
from cachekeeper.format.layout import manifest_key
from cachekeeper.format.manifest import Manifest
from cachekeeper.presence import captured_sets, look_up, plan_presence, stored_entries
from cachekeeper.publish.upload import publish
from cachekeeper.stores.file import FileStore
from tests.builders import fingerprint, spec, write_tree

FP = fingerprint().id


def test_the_catalog_answers_when_the_store_was_not_asked() -> None:
    p = plan_presence(FP, ["a", "b", "c"], indexed={"a": "d1", "c": "d3"})
    assert p.built == ("a", "c") and p.missing == ("b",)
    assert p.is_built("a") and not p.is_built("b")
    assert not p.unindexed and not p.stale          # nothing to repair without a store answer


def test_the_store_wins_and_the_plan_says_which_index_rows_to_repair() -> None:
    p = plan_presence(FP, ["a", "b", "c"], indexed={"a": "d1", "b": "d2"}, stored={"a", "c"})
    assert p.built == ("a", "c") and p.missing == ("b",)
    assert p.unindexed == ("c",)                    # in the bucket, not in the index: record it
    assert p.stale == {"b": "d2"}                   # indexed, manifest gone: forget the row, rebuild


def test_held_is_only_ever_a_missing_entry_and_keys_keep_their_order() -> None:
    p = plan_presence(FP, ["b", "a", "b"], stored={"a"}, held={"a": "w1", "b": "w2"})
    assert p.built == ("a",) and p.missing == ("b",)
    assert p.held == {"b": "w2"}


def test_a_plan_needs_an_answer_from_somewhere() -> None:
    with pytest.raises(ValueError):
        plan_presence(FP, ["a"])


@pytest.fixture()
def world(tmp_path: Path) -> Iterator[tuple[FileStore, Catalog, str]]:
    store = FileStore(tmp_path / "store")
    root = write_tree(tmp_path / "build", {"a.bin": b"a" * 10})
    m = publish(store, fingerprint=fingerprint(), spec=spec("tiny"), roots={"cache": root},
                include=lambda root, rel, path: True).manifest
    with Catalog.open(f"sqlite:///{tmp_path / 'catalog.db'}") as catalog:
        yield store, catalog, m.name


def test_look_up_from_the_catalog_makes_no_store_request(world: tuple[FileStore, Catalog, str]) -> None:
    store, catalog, built = world
    catalog.record(store_manifest(store, built), store_url=store.url)

    class NoStore(FileStore):
        def list(self, prefix: str = "") -> Iterator[str]:
            raise AssertionError("the store was asked")

    p = look_up(FP, [built, "0" * 32], catalog=catalog, store=NoStore(store.root))
    assert p.built == (built,) and p.missing == ("0" * 32,)


def test_look_up_from_the_store_lists_entries_not_captured_sets(world: tuple[FileStore, Catalog, str]) -> None:
    store, catalog, built = world
    store.put_bytes(manifest_key(FP, "captured/" + "1" * 16), b"{}")
    assert stored_entries(store, FP) == {built}
    p = look_up(FP, [built, "0" * 32], store=store)
    assert p.built == (built,) and p.missing == ("0" * 32,)
    assert captured_sets(FP, store=store) == 1 and captured_sets(FP, catalog=catalog) == 0


def test_verify_store_finds_what_the_index_lacks(world: tuple[FileStore, Catalog, str]) -> None:
    store, catalog, built = world
    p = look_up(FP, [built], catalog=catalog, store=store, verify_store=True)
    assert p.built == (built,) and p.unindexed == (built,)


def test_holders_are_live_leases_of_missing_entries(world: tuple[FileStore, Catalog, str]) -> None:
    _, catalog, _ = world
    catalog.enqueue([(FP, "0" * 32, "{}"), (FP, "1" * 32, "{}")])
    claim = catalog.claim("w1", lease_s=60, fingerprint_id=FP, exclude={"1" * 32})
    assert claim is not None
    p = look_up(FP, ["0" * 32, "1" * 32], catalog=catalog, holders=True)
    assert p.missing == ("0" * 32, "1" * 32) and p.held == {"0" * 32: "w1"}   # "1"*32 is pending, not held


def store_manifest(store: FileStore, name: str) -> Manifest:
    key = manifest_key(FP, name)
    return Manifest.from_bytes(store.get_bytes(key), source=key)
