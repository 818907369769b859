"""The bucket layout is a public format: these keys are pinned, and every parser inverts its builder."""

from __future__ import annotations

from pathlib import Path

import pytest

from cachekeeper.format import layout
from cachekeeper.format.layout import ManifestKey, TempKey
from cachekeeper.fs.paths import temp_path

DIGEST = "ab" + "0" * 62
FP_ID = "0123456789abcdef"
ENTRY = "f" * 32


def test_keys_are_the_published_layout() -> None:
    # Changing any of these strands every bucket already written: it needs a format version, not an edit.
    assert layout.blob_key(DIGEST) == f"blobs/sha256/ab/{DIGEST}"
    assert layout.manifest_key(FP_ID, ENTRY) == f"manifests/{FP_ID}/{ENTRY}.json"
    assert layout.manifest_key(FP_ID, "captured/" + "1" * 16) == f"manifests/{FP_ID}/captured/{'1' * 16}.json"
    assert layout.captured_prefix(FP_ID) == f"manifests/{FP_ID}/captured/"
    assert layout.manifest_prefix(FP_ID) == f"manifests/{FP_ID}/" and layout.manifest_prefix() == "manifests/"
    assert layout.signature_key(DIGEST) == f"signatures/{DIGEST}"


@pytest.mark.parametrize("name", [ENTRY, "pch-0123456789abcdef", "captured/" + "1" * 16])
def test_a_manifest_key_parses_back_to_its_fingerprint_and_name(name: str) -> None:
    parsed = layout.parse_manifest_key(layout.manifest_key(FP_ID, name))
    assert parsed == ManifestKey(FP_ID, name)
    assert parsed.captured == name.startswith("captured/")
    assert parsed.key == layout.manifest_key(FP_ID, name)


def test_blob_and_signature_keys_parse_back_to_their_digest() -> None:
    assert layout.parse_blob_key(layout.blob_key(DIGEST)) == DIGEST
    assert layout.parse_signature_key(layout.signature_key(DIGEST)) == DIGEST


@pytest.mark.parametrize("key", [
    f"manifests/{FP_ID}/{ENTRY}",                      # no suffix
    f"manifests/{FP_ID}/{ENTRY}.json.bak",
    f"manifests/{ENTRY}.json",                         # no fingerprint directory
    f"manifests/{FP_ID}/other/{ENTRY}.json",           # only captured/ sits below a toolchain
    f"manifests/{FP_ID}/captured/x/{ENTRY}.json",
    f"manifests/{FP_ID}/.{ENTRY}.json",                # dot-names: temp files, "." and ".."
    f"manifests/../{ENTRY}.json",
    f"blobs/sha256/ab/{DIGEST}",
    f"signatures/{DIGEST}",
])
def test_a_key_of_another_kind_is_not_a_manifest_key(key: str) -> None:
    assert layout.parse_manifest_key(key) is None


@pytest.mark.parametrize("key", [
    f"blobs/sha256/cd/{DIGEST}",                       # shard does not match the digest
    f"blobs/sha256/{DIGEST}",
    f"blobs/sha256/ab/{DIGEST[:-1]}",
    f"blobs/sha256/ab/{DIGEST.upper()}",
    f"blobs/sha256/ab/{DIGEST}.ck-tmp",
    f"signatures/{DIGEST}",
])
def test_a_key_of_another_kind_is_not_a_blob_key(key: str) -> None:
    assert layout.parse_blob_key(key) is None


def test_signature_parser_refuses_other_keys() -> None:
    assert layout.parse_signature_key(f"signatures/{DIGEST}.tmp") is None
    assert layout.parse_signature_key(layout.blob_key(DIGEST)) is None


def test_the_file_stores_temp_names_parse_as_debris(tmp_path: Path) -> None:
    written = temp_path(tmp_path / "blobs" / "sha256" / "ab" / DIGEST, tag="4242").relative_to(tmp_path)
    assert layout.parse_temp_key(written.as_posix()) == TempKey("blobs/sha256/ab/", "4242")
    assert layout.parse_temp_key(layout.blob_key(DIGEST)) is None
    assert layout.parse_manifest_key(written.as_posix()) is None and layout.parse_blob_key(written.as_posix()) is None


def test_captured_names_live_in_the_captured_directory() -> None:
    name = layout.captured_set_name("1" * 16)
    assert layout.is_captured_name(name) and not layout.is_captured_name(ENTRY)
    assert layout.manifest_key(FP_ID, name).startswith(layout.captured_prefix(FP_ID))
