"""A small world for the inspection tests: a config for the fake backend (tests/fakes.py), manifests of its
entries built for chosen toolchains with chosen build times, recorded in a catalog and a file store."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from cachekeeper.catalog import Catalog
from cachekeeper.config import Config, load_config
from cachekeeper.format.fingerprint import Fingerprint
from cachekeeper.format.layout import blob_key
from cachekeeper.format.manifest import KIND_CAPTURED, KIND_ENTRY, BlobRecord, FileRecord, Manifest
from cachekeeper.format.spec import EntrySpec
from cachekeeper.stores.base import Store
from tests.fakes import ENABLE, fake_config

# The fake backend's fingerprint is {"toolchain": $FAKE_TOOLCHAIN (default "1")} plus its options.
HOST = Fingerprint.of("fake", {"toolchain": "1"})
OTHER = Fingerprint.of("fake", {"toolchain": "2"})
THIRD = Fingerprint.of("fake", {"toolchain": "3", "omp_threads": "8"})

def write_config(tmp: Path) -> Path:
    (tmp / "model").mkdir(exist_ok=True)
    path = tmp / "ck.yaml"
    path.write_text(fake_config(tmp / "model", models=(("tiny", "transformer"), ("small", "unet"))))
    return path


def specs(config_path: Path) -> list[EntrySpec]:
    config: Config = load_config(config_path)
    return [e.spec for e in config.entries()]


def content(spec: EntrySpec, fp: Fingerprint, size: int) -> bytes:
    seed = f"{spec.key}{fp.id}".encode()
    return (seed * (size // len(seed) + 1))[:size]


def manifest(spec: EntrySpec, fp: Fingerprint, *, size: int = 10_000, seconds: float | None = 10.0,
             kind: str = KIND_ENTRY) -> Manifest:
    """One file, one blob whose bytes `publish` writes (so hydrate can really fetch it)."""
    sha = hashlib.sha256(content(spec, fp, size)).hexdigest()
    build = {"host": "builder-1"} | ({"seconds": seconds} if seconds is not None else {})
    return Manifest(kind=kind, name=spec.key, fingerprint=fp, files=(FileRecord("cache", "a.bin", size, sha, sha),),
                    blobs=(BlobRecord(sha, size, packed=False),), spec=spec, build=build)


def publish(catalog: Catalog | None, store: Store | None, *manifests: Manifest) -> None:
    """The publisher's order: blobs, manifest object, then the catalog row."""
    for m in manifests:
        if store is not None:
            assert m.spec is not None
            store.put_bytes(blob_key(m.blobs[0].digest), content(m.spec, m.fingerprint, m.total_size))
            store.put_bytes(m.key, m.to_bytes())
        if catalog is not None:
            catalog.record(m, store_url=store.url if store else "file:///nowhere")


def cli_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, **ENABLE, "CACHEKEEPER_HOME": str(tmp / "home")}
    for name in ("CACHEKEEPER_STORE", "CACHEKEEPER_CATALOG", "FAKE_TOOLCHAIN"):
        env.pop(name, None)
    return env | extra


def captured(fp: Fingerprint, tag: str = "0" * 16, size: int = 5_000) -> Manifest:
    """A captured set (issue #9): runtime compiles a serving host wrote back; no spec, so no shape."""
    sha = hashlib.sha256(f"captured{tag}{fp.id}".encode()).hexdigest()
    return Manifest(kind=KIND_CAPTURED, name=f"captured/{tag}", fingerprint=fp,
                    files=(FileRecord("cache", "c.bin", size, sha, sha),), blobs=(BlobRecord(sha, size, packed=False),),
                    provenance={"host": "server-1"})
