"""Execute a hydrate plan: parallel fetch, verify every byte, temp-then-rename into place."""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import BinaryIO

from ..errors import IntegrityError, ObjectNotFound
from ..fsutil import atomic_write_bytes, atomic_writer, sha256_file
from ..manifest import blob_key
from ..stores.base import Store
from .plan import HydratePlan, Placement, coalesce
from .state import PlacedFile

FETCH_THREADS = 16


@dataclass
class FetchStats:
    files: int = 0
    bytes: int = 0
    verified_local: int = 0
    missing_blobs: set[str] = field(default_factory=set)   # named by a manifest, gone from the store


class _HashingWriter:
    """Wraps the temp file: hashes what is written so the digest is checked before the rename."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.hash = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        return self.out.write(data)


def _placed(p: Placement) -> PlacedFile:
    st = os.stat(p.target)
    return PlacedFile(p.record.sha256, st.st_size, st.st_mtime_ns)


def _write_verified(p: Placement, data: bytes) -> PlacedFile:
    # No fsync per file: rename already makes kill -9 safe; `hydrate` syncs once before the state file.
    atomic_write_bytes(p.target, data, expected_sha256=p.record.sha256, durable=False)
    return _placed(p)


def _fetch_single(store: Store, digest: str, members: list[Placement]) -> list[tuple[Placement, PlacedFile]]:
    first, *rest = members
    with atomic_writer(first.target, durable=False) as out:
        writer = _HashingWriter(out)
        store.download(blob_key(digest), writer)  # type: ignore[arg-type]
        if writer.hash.hexdigest() != digest:
            raise IntegrityError(f"blob {digest[:12]}… for {first.record.path} failed verification")
    done = [(first, _placed(first))]
    for p in rest:  # the same bytes at another path (identical files share a blob)
        done.append((p, _write_verified(p, first.target.read_bytes())))
    return done


def _fetch_pack(store: Store, digest: str, size: int, members: list[Placement]) -> list[tuple[Placement, PlacedFile]]:
    needed = sum(p.record.size for p in members)
    done: list[tuple[Placement, PlacedFile]] = []
    if needed * 2 >= size:
        data = store.get_bytes(blob_key(digest))
        if hashlib.sha256(data).hexdigest() != digest:
            raise IntegrityError(f"pack {digest[:12]}… failed verification")
        for p in members:
            piece = data[p.record.offset:p.record.offset + p.record.size]
            done.append((p, _write_verified(p, piece)))
        return done
    # Few members needed: ranged reads; each file is still verified by its own sha256.
    for start, length, group in coalesce(members):
        data = store.get_range(blob_key(digest), start, length)
        for p in group:
            off = p.record.offset - start
            done.append((p, _write_verified(p, data[off:off + p.record.size])))
    return done


def _check_local(p: Placement) -> tuple[Placement, PlacedFile | None]:
    try:
        ok = sha256_file(p.target) == p.record.sha256
    except OSError:
        ok = False
    return p, (_placed(p) if ok else None)


def execute(store: Store, plan: HydratePlan, threads: int = FETCH_THREADS) -> tuple[dict[str, PlacedFile], FetchStats]:
    """Returns what was placed ("root/path" -> PlacedFile) and counters."""
    placed: dict[str, PlacedFile] = {}
    stats = FetchStats()
    with ThreadPoolExecutor(threads) as pool:
        # Present-but-unknown files: keep them if their bytes are right, else fetch them too.
        for p, rec in pool.map(_check_local, plan.check):
            if rec is not None:
                placed[f"{p.record.root}/{p.record.path}"] = rec
                stats.verified_local += 1
            else:
                plan.fetch.setdefault(p.record.blob, []).append(p)
        futures = {}
        for digest, members in plan.fetch.items():
            if plan.blob_packed[digest]:
                futures[digest] = pool.submit(_fetch_pack, store, digest, plan.blob_sizes[digest], members)
            else:
                futures[digest] = pool.submit(_fetch_single, store, digest, members)
        for digest, fut in futures.items():
            try:
                done = fut.result()
            except ObjectNotFound:
                # Like a remote build cache: a manifest whose bytes are gone is a miss, not a failure.
                stats.missing_blobs.add(digest)
                continue
            for p, rec in done:
                placed[f"{p.record.root}/{p.record.path}"] = rec
                stats.files += 1
                stats.bytes += p.record.size
    return placed, stats

