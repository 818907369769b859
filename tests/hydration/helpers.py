"""Builders the boot-path tests share: a published cache, and a hydrate call with the fake toolchain."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cachekeeper.config.hydrate import HydrateOptions
from cachekeeper.format.manifest import Manifest
from cachekeeper.hydration.engine import HydrateReport, Target, hydrate
from cachekeeper.hydration.resolve import Pin
from cachekeeper.publish import snapshot
from cachekeeper.publish.upload import publish
from cachekeeper.stores.base import Store
from tests.builders import fingerprint, read_tree, spec, write_tree

__all__ = ["build_tree", "fingerprint", "hydrate_into", "publish_tree", "read_tree", "spec", "write_tree"]


def build_tree(n_small: int = 12, n_blobs: int = 20, seed: int = 8) -> dict[str, bytes]:
    """Small files (packed) and 64–160 KiB files (one blob each, with `separate_blobs_above`): many
    requests per hydrate, each with a body worth cutting in half."""
    rng = random.Random(seed)
    files = {f"p/{i:02d}/s.neff": rng.randbytes(rng.randrange(100, 4000)) for i in range(n_small)}
    files.update({f"b/{i:02d}.neff": rng.randbytes(rng.randrange(64 << 10, 160 << 10)) for i in range(n_blobs)})
    return files


def publish_tree(store: Store, root: Path, monkeypatch: pytest.MonkeyPatch, *, model: str = "tiny",
                 separate_blobs_above: int = 32 << 10) -> Manifest:
    monkeypatch.setattr(snapshot, "SMALL_FILE", separate_blobs_above)
    return publish(store, fingerprint=fingerprint(), spec=spec(model), roots={"cache": root},
                   include=lambda root, rel, path: True).manifest


def hydrate_into(open_store: Callable[[], Store], dest: Path, names: list[str], **settings: Any) -> HydrateReport:
    """Hydrate the entries `names` into `dest` with the fake toolchain; `settings` are HydrateOptions fields."""
    return hydrate(Target(fingerprint(), dest, [Pin(n) for n in names]), HydrateOptions(**settings), open_store)


def record_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The path of every file or directory fsynced from now on, in order (from any thread)."""
    import os

    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return synced


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def invoke_hydrate(tmp: Path, *args: str, **env: str) -> Any:
    """`cachekeeper hydrate ARGS` in-process (CliRunner) with the fake backends on and a home under `tmp`."""
    from click.testing import CliRunner

    from cachekeeper.cli import _register, cli
    from tests.fakes import ENABLE

    _register()
    return CliRunner().invoke(cli, ["hydrate", *args], env={**ENABLE, "FAKE_SHARED_DIR": str(tmp / "sh"),
                                                            "CACHEKEEPER_HOME": str(tmp / "home"), **env})
