"""Hydrate: fill a backend's cache dir with exactly the artifacts this host can use.

    wanted manifests (names or listing) ─▶ plan (pure) ─▶ parallel fetch ─▶ verify ─▶ rename ─▶ state

Boot-path rules: no torch, no SQLAlchemy, no cloud SDK unless the store needs it; a repeat run whose
state file still matches the disk returns without opening the store.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import DestinationError, NothingToHydrate, ToolchainMismatch
from ..fingerprint import Fingerprint
from ..fsutil import FileLock, ensure_dir, sweep_temp
from ..manifest import Manifest
from ..stores.base import Store

if TYPE_CHECKING:
    from ..signing import PublicKey
    from .fetch import FetchStats
from .plan import plan_hydrate
from .resolve import Pin, fetch_manifests, list_entries, other_toolchains, with_shared
from .state import STATE_DIR, PlacedFile, State, load_state, save_state, stat_matches, state_dir

__all__ = ["HydrateReport", "hydrate"]


@dataclass
class HydrateReport:
    dest: Path
    fingerprint_id: str
    noop: bool = False
    manifests: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)      # wanted entry names not built for this toolchain
    files_total: int = 0
    files_fetched: int = 0
    bytes_fetched: int = 0
    files_verified_local: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, object]:
        d = dict(self.__dict__)
        d["dest"] = str(self.dest)
        return d


def _probe(verify: bool) -> Callable[[Path, PlacedFile | None], str]:
    def probe(path: Path, placed: PlacedFile | None) -> str:
        if placed is not None and not verify and stat_matches(path, placed):
            return "ok"
        return "check" if path.exists() else "missing"
    return probe


def _prepare_dest(dest: Path) -> None:
    ensure_dir(dest)
    if not os.access(dest, os.W_OK):
        raise DestinationError(f"destination {dest} is not writable")


def _guard_toolchain(dest: Path, state: State | None, fingerprint: Fingerprint) -> None:
    if state is not None and state.fingerprint_id != fingerprint.id:
        raise ToolchainMismatch(
            f"{dest} holds artifacts of toolchain {state.fingerprint_id}; this host is {fingerprint.id}")
    if state is None and any(p.name != STATE_DIR for p in dest.iterdir()):
        raise ToolchainMismatch(f"{dest} already holds files cachekeeper did not place (unknown toolchain)",
                                "hydrate into an empty directory; one directory holds one toolchain")


def _still_in_place(state: State, pins: list[Pin], trusted_ids: set[str]) -> bool:
    """The fast no-op: every wanted manifest was applied (and, if keys are required, passed one of them),
    and every placed file is unchanged."""
    for pin in pins:
        digest = state.manifests.get(pin.name)
        if digest is None or (pin.digest is not None and pin.digest != digest):
            return False
        if trusted_ids and not trusted_ids & set(state.signed.get(pin.name, ())):
            return False
    for key, placed in state.files.items():
        root, _, rel = key.partition("/")
        if root not in state.roots or not stat_matches(Path(state.roots[root]) / rel, placed):
            return False
    return True


def hydrate(*, open_store: Callable[[], Store], fingerprint: Fingerprint, dest: Path,
            extra_roots: Mapping[str, Path], pins: list[Pin] | None = None, models: set[str] | None = None,
            verify: bool = False, require_all: bool = False, threads: int = 16,
            trusted: tuple[PublicKey, ...] = ()) -> HydrateReport:
    """Hydrate `dest` (the backend's cache root) plus `extra_roots`.

    `pins`: the wanted entry names (config or lockfile); None lists every entry of this toolchain.
    """
    t0 = time.monotonic()
    dest = dest.absolute()
    _prepare_dest(dest)
    report = HydrateReport(dest=dest, fingerprint_id=fingerprint.id)
    roots = {"cache": dest, **{k: v.absolute() for k, v in extra_roots.items()}}
    with FileLock(state_dir(dest) / "lock"):
        state = load_state(dest)
        _guard_toolchain(dest, state, fingerprint)
        trusted_ids = {k.id for k in trusted}
        if state is not None and pins is not None and not verify and _still_in_place(state, pins, trusted_ids):
            report.noop = True
            report.manifests = [p.name for p in pins]
            report.files_total = len(state.files)
            report.seconds = time.monotonic() - t0
            return report
        if state is None:
            # Claim the directory for this toolchain before the first byte lands, so a hydrate killed
            # midway is resumed (present files verified and adopted) rather than refused as foreign.
            state = State(fingerprint_id=fingerprint.id, backend=fingerprint.backend,
                          roots={k: str(v) for k, v in roots.items()})
            save_state(dest, state)
        for root in roots.values():
            sweep_temp(root)  # leftovers of a killed hydrate; never visible under a real name
        from .fetch import execute  # not on the no-op path: it pulls in the thread pool machinery

        store = open_store()
        manifests = _resolve(store, fingerprint, pins, models, report, require_all, trusted)
        plan = plan_hydrate(manifests, roots, state, _probe(verify))
        placed, stats = execute(store, plan, threads)
        if stats.files:
            os.sync()  # one flush for all files, before the state file says they are there
        broken = {m.name for m in manifests if any(b.digest in stats.missing_blobs for b in m.blobs)}
        applied = [m for m in manifests if m.name not in broken]  # broken ones are retried next time
        _save(dest, fingerprint, state, applied, roots, placed, sorted(trusted_ids))
        _fill(report, applied, stats, len(plan.keep) + len(placed))
        report.missing += sorted(broken)
        if broken and require_all:
            raise NothingToHydrate(f"{store.url} lacks blobs of {len(broken)} manifests ({', '.join(sorted(broken))})",
                                   "run `cachekeeper verify`, then prebuild the affected entries again")
    report.seconds = time.monotonic() - t0
    return report


def _resolve(store: Store, fingerprint: Fingerprint, pins: list[Pin] | None, models: set[str] | None,
             report: HydrateReport, require_all: bool, trusted: tuple[PublicKey, ...]) -> list[Manifest]:
    if pins is None:
        entries = list_entries(store, fingerprint, models, trusted)
    else:
        entries, report.missing = fetch_manifests(store, fingerprint, pins, trusted)
    if not entries or (require_all and report.missing):
        what = f"lacks {len(report.missing)} of {len(pins)} wanted entries" if pins else "has no entries"
        others = other_toolchains(store, fingerprint.backend, fingerprint)
        detail = ("; published toolchains differ: " + " | ".join(others)) if others else ""
        raise NothingToHydrate(f"{store.url} {what} for {fingerprint.backend} toolchain {fingerprint.id}{detail}")
    return with_shared(store, fingerprint, entries, trusted)


def _save(dest: Path, fingerprint: Fingerprint, old: State | None, manifests: list[Manifest],
          roots: Mapping[str, Path], placed: dict[str, PlacedFile], trusted_ids: list[str]) -> None:
    """Old entries that are still intact (this covers files the plan kept), plus what was just placed."""
    state = State(fingerprint_id=fingerprint.id, backend=fingerprint.backend,
                  roots={k: str(v) for k, v in roots.items()})
    if old is not None:
        state.manifests.update(old.manifests)
        state.signed.update(old.signed)
        state.files.update({k: f for k, f in old.files.items()
                            if k.partition("/")[0] in roots
                            and stat_matches(roots[k.partition("/")[0]] / k.partition("/")[2], f)})
    state.files.update(placed)
    state.manifests.update({m.name: m.digest for m in manifests})
    state.signed.update({m.name: trusted_ids for m in manifests})
    save_state(dest, state)


def _fill(report: HydrateReport, manifests: list[Manifest], stats: FetchStats, total: int) -> None:
    report.manifests = [m.name for m in manifests]
    report.files_total = total
    report.files_fetched = stats.files
    report.bytes_fetched = stats.bytes
    report.files_verified_local = stats.verified_local
