"""Small hand-made manifests (the publisher is not needed to test the index over them)."""

from __future__ import annotations

import hashlib

from cachekeeper.format.fingerprint import Fingerprint
from cachekeeper.format.manifest import KIND_ENTRY, KIND_SHARED, BlobRecord, FileRecord, Manifest
from cachekeeper.format.spec import EntrySpec, Shape
from cachekeeper.stores.base import Store

FP = Fingerprint.of("inductor", {"torch": "2.13.0", "cpu": "avx512"})
FP2 = Fingerprint.of("inductor", {"torch": "2.13.0", "cpu": "avx2"})
NEURON = Fingerprint.of("neuron", {"neuronx-cc": "2.21", "target": "trn2"})


def _file(path: str, size: int) -> tuple[FileRecord, BlobRecord]:
    sha = hashlib.sha256(path.encode()).hexdigest()
    return FileRecord("cache", path, size, sha, sha), BlobRecord(sha, size, packed=False)


def entry(model: str = "flux", *, height: int = 64, width: int = 64, batch: int = 1, dtype: str = "float32",
          fp: Fingerprint = FP, sizes: tuple[int, ...] = (100, 20), host: str = "builder-1") -> Manifest:
    spec = EntrySpec(model=model, component="transformer", backend=fp.backend, mode="full",
                     shape=Shape(height, width, batch), dtype=dtype, revision="r1")
    records = [_file(f"fxgraph/{spec.key}/{i}", size) for i, size in enumerate(sizes)]
    manifest = Manifest(kind=KIND_ENTRY, name=spec.key, fingerprint=fp, files=tuple(f for f, _ in records),
                        blobs=tuple(b for _, b in records), spec=spec, build={"host": host})
    manifest.validate()
    return manifest


def shared(name: str = "pch-1", *, fp: Fingerprint = FP, size: int = 1000) -> Manifest:
    record, blob = _file(f"{name}/header.gch", size)
    return Manifest(kind=KIND_SHARED, name=name, fingerprint=fp, files=(record,), blobs=(blob,))


def publish(store: Store, *manifests: Manifest) -> None:
    for m in manifests:
        assert store.put_bytes(m.key, m.to_bytes())
