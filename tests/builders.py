"""Small builders shared by the core tests."""

from __future__ import annotations

from pathlib import Path

from cachekeeper.format.fingerprint import Fingerprint
from cachekeeper.format.spec import EntrySpec, Shape


def spec(model: str = "tiny", height: int = 64, mode: str = "full") -> EntrySpec:
    return EntrySpec(model=model, component="transformer", backend="fake", mode=mode,
                     shape=Shape(height, 64, 1), dtype="float32")


def fingerprint(toolchain: str = "1") -> Fingerprint:
    return Fingerprint.of("fake", {"toolchain": toolchain})


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root


def read_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".cachekeeper" not in p.parts}
