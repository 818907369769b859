"""Prebuild: plan the matrix for this host's toolchains, build what is missing, publish it.

With a catalog, entries go through its queue (`claim` with a short lease a heartbeat renews), so any
number of workers on any number of machines build each (toolchain, entry) once, and a dead worker's
entry is claimable again within about one lease. Without one, the worker walks its plan (or its
`--shard`) alone. `build.workers` runs that many builds at once, each on its own devices.

What is built already is `presence.py`'s answer: an entry the catalog indexes costs no store request
(`verify_store` checks the store too); without a catalog, one listing per toolchain answers it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ..backends.base import BuildJob
from ..backends.host import HostToolchain, host_toolchain
from ..config import Config, MatrixEntry
from ..errors import ManifestError, QueuePayloadError
from ..format.layout import manifest_key
from ..format.manifest import Manifest
from ..presence import look_up
from ..publish.upload import publish
from ..stores.base import Store
from ..stores.manifests import manifest_keys
from . import payload
from .devices import slot_envs
from .lease import Backoff, Heartbeat, LeaseSettings
from .runner import Stop, run_build_process
from .shard import Shard, split
from .workdirs import sweep_stale, workdir

if TYPE_CHECKING:
    from ..catalog import Catalog, Claim
    from ..format.signing import SigningKey

WAIT_POLL_S = 2.0


# "held": a live worker is building it; "refused": a pin or input this host cannot meet
OutcomeStatus = Literal["built", "present", "failed", "held", "refused"]


@dataclass(frozen=True)
class Outcome:
    label: str
    key: str
    fingerprint_id: str
    status: OutcomeStatus
    seconds: float = 0.0
    detail: str = ""            # failure reason and log tail, the manifest digest, or who holds it
    holder: str = ""            # the worker holding a "held" entry


@dataclass
class PrebuildReport:
    outcomes: list[Outcome] = field(default_factory=list)
    swept: list[Path] = field(default_factory=list)     # stale workdirs of dead workers, removed
    planned: int = 0                                     # entries this worker (or shard) wanted

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    @property
    def held(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "held"]

    @property
    def refused(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "refused"]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.outcomes:
            out[o.status] = out.get(o.status, 0) + 1
        return out


@dataclass(frozen=True)
class RunSettings:
    """How this worker runs, beyond what the config says."""

    lease: LeaseSettings = field(default_factory=LeaseSettings)
    workers: int | None = None            # None: the config's build.workers
    shard: Shard | None = None
    wait: bool = False                    # wait for entries live workers hold
    verify_store: bool = False            # also check the store for entries the catalog indexes
    worker: str | None = None
    workdir_root: Path | None = None
    signing_key: SigningKey | None = None
    wait_poll_s: float = WAIT_POLL_S


def toolchains(config: Config, entries: list[MatrixEntry]) -> dict[str, HostToolchain]:
    """This host's toolchain for each backend the plan uses (resolved as hydrate resolves it); an
    unusable backend stops the run."""
    return {name: host_toolchain(config, name) for name in sorted({e.spec.backend for e in entries})}


def _outcome(entry: MatrixEntry, tc: HostToolchain, status: OutcomeStatus, seconds: float = 0.0, detail: str = "",
             holder: str = "") -> Outcome:
    return Outcome(entry.spec.label(), entry.spec.key, tc.fingerprint.id, status, seconds, detail, holder)


# --- what is built already ---------------------------------------------------------------------------


def split_built(entries: list[MatrixEntry], tcs: dict[str, HostToolchain], store: Store, catalog: Catalog | None,
                *, verify_store: bool = False) -> tuple[list[MatrixEntry], list[Outcome]]:
    """(entries to build, "present" outcomes). With a catalog and no `verify_store`: no store request.
    When the store was asked too, the index is repaired to match it (the bucket is the source of truth)."""
    todo: list[MatrixEntry] = []
    present: list[Outcome] = []
    by_fp: dict[str, list[MatrixEntry]] = {}
    for e in entries:
        by_fp.setdefault(tcs[e.spec.backend].fingerprint.id, []).append(e)
    for fp_id, group in by_fp.items():
        presence = look_up(fp_id, [e.spec.key for e in group], catalog=catalog, store=store,
                           verify_store=verify_store)
        if catalog is not None:
            for key in presence.unindexed:     # in the store, not yet in the index
                _index(store, catalog, manifest_key(fp_id, key))
            for digest in presence.stale.values():   # an index row whose manifest is gone (gc, repair): rebuild it
                catalog.forget(digest)
        for e in group:
            if presence.is_built(e.spec.key):
                present.append(_outcome(e, tcs[e.spec.backend], "present"))
            else:
                todo.append(e)
    return todo, present


def _index(store: Store, catalog: Catalog, key: str) -> None:
    catalog.record(Manifest.from_bytes(store.get_bytes(key), source=key), store_url=store.url)


def published_since(entry: MatrixEntry, tc: HostToolchain, store: Store, catalog: Catalog | None) -> bool:
    """One HEAD before compiling a claimed entry: another worker (another config) may have published it."""
    key = manifest_key(tc.fingerprint.id, entry.spec.key)
    if not store.exists(key):
        return False
    if catalog is not None:
        _index(store, catalog, key)
    return True


# --- shards ------------------------------------------------------------------------------------------


def shard_entries(entries: list[MatrixEntry], tcs: dict[str, HostToolchain], shard: Shard, store: Store,
                  catalog: Catalog | None) -> list[MatrixEntry]:
    """This shard's part of the whole planned matrix (see shard.py for why it is the whole matrix)."""
    ours = {tc.fingerprint.id for tc in tcs.values()}
    keys = [e.spec.key for e in entries]
    if catalog is not None:
        costs = catalog.build_costs(keys, exclude_fingerprints=ours)
    else:
        costs = store_costs(store, set(keys), ours)
    mine = set(split(keys, shard.count, costs)[shard.index])
    return [e for e in entries if e.spec.key in mine]


def store_costs(store: Store, keys: set[str], exclude_fingerprints: set[str]) -> dict[str, float]:
    """Recorded build seconds of these entries under other toolchains, read from their manifests."""
    found: dict[str, str] = {}
    for m in manifest_keys(store):
        if m.fingerprint_id not in exclude_fingerprints and m.name in keys:
            found.setdefault(m.name, m.key)

    def seconds(key: str) -> float:
        try:
            value = Manifest.from_bytes(store.get_bytes(key), source=key).build.get("seconds")
        except ManifestError:
            return 0.0
        return float(value) if isinstance(value, int | float) else 0.0

    with ThreadPoolExecutor(16) as pool:
        return {e: s for e, s in zip(found, pool.map(seconds, found.values()), strict=True) if s > 0}


# --- one build ---------------------------------------------------------------------------------------


def build_entry(entry: MatrixEntry, tc: HostToolchain, store: Store, *, catalog: Catalog | None, timeout: float,
                workdir_root: Path | None = None, env: dict[str, str] | None = None,
                stop: Stop | None = None, signing_key: SigningKey | None = None) -> Outcome | None:
    """Compile and publish one entry; None if `stop` was set (the lease was lost) before it published."""
    spec, fp = entry.spec, tc.fingerprint
    with workdir(workdir_root) as wd:
        roots = tc.backend.build_roots(wd)
        for root in roots.values():
            root.mkdir(parents=True, exist_ok=True)
        job = BuildJob(spec, entry.model, {k: str(v) for k, v in roots.items()}, tc.options,
                       result_path=str(wd / "result.json"))
        cmd = tc.backend.build_command(job)
        cmd.env.update(env or {})
        res = run_build_process(cmd, timeout=timeout, log_path=wd / "build.log", cwd=wd, stop=stop)
        if res.stopped or (stop is not None and stop.is_set()):
            return None
        if not res.ok:
            return _outcome(entry, tc, "failed", res.seconds, f"build {res.describe()}\n{res.log_tail}")
        result = json.loads((wd / "result.json").read_text()) if (wd / "result.json").exists() else {}
        build = {"host": socket.gethostname(), "seconds": round(res.seconds, 3), "result": result,
                 "built_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
        if not any(f.is_file() for r in roots.values() for f in r.rglob("*")):
            return _outcome(entry, tc, "failed", res.seconds, f"build wrote no artifacts\n{res.log_tail}")
        pr = publish(store, fingerprint=fp, spec=spec, roots=roots, include=tc.backend.include,
                     shared_roots=tc.backend.shared_roots, build=build, catalog=catalog, signing_key=signing_key,
                     relocatable_roots=tc.backend.relocatable_roots)
        return _outcome(entry, tc, "built" if pr.created else "present", res.seconds, pr.manifest.digest)


# --- the run -----------------------------------------------------------------------------------------


class _BuildSlots:
    """State shared by this worker's build slots."""

    def __init__(self, config: Config, store: Store, catalog: Catalog | None, tcs: dict[str, HostToolchain],
                 settings: RunSettings, progress: Callable[[Outcome], None] | None, report: PrebuildReport) -> None:
        self.config, self.store, self.catalog, self.tcs, self.settings = config, store, catalog, tcs, settings
        self.progress, self.report = progress, report
        self.lock = threading.Lock()
        self.worker = settings.worker or f"{socket.gethostname()}:{os.getpid()}"
        self.refused: set[str] = set()
        # Set when this process is interrupted (Ctrl-C, SIGTERM): slots stop their builds and claim no more,
        # and every claim still held goes back to the queue, so the next run (on any host) builds it.
        self.stopping = threading.Event()
        self.plan: dict[tuple[str, str], MatrixEntry] = {}
        self.by_fp = {tc.fingerprint.id: tc for tc in tcs.values()}

    def done(self, o: Outcome) -> None:
        with self.lock:
            self.report.outcomes.append(o)
        if self.progress is not None:
            self.progress(o)

    def build(self, entry: MatrixEntry, tc: HostToolchain, env: dict[str, str],
              stop: threading.Event | None = None) -> Outcome | None:
        return build_entry(entry, tc, self.store, catalog=self.catalog, timeout=self.config.build_timeout,
                           workdir_root=self.settings.workdir_root, env=env, stop=AnyOf(self.stopping, stop),
                           signing_key=self.settings.signing_key)

    # without a catalog: the slots take entries off one shared list

    def walk(self, todo: list[MatrixEntry], envs: dict[str, list[dict[str, str]]], workers: int) -> None:
        pending = list(reversed(todo))

        def slot(i: int) -> None:
            while not self.stopping.is_set():
                with self.lock:
                    if not pending:
                        return
                    e = pending.pop()
                o = self.build(e, self.tcs[e.spec.backend], _slot_env(envs, e.spec.backend, i))
                if o is not None:   # None: stopped by an interrupt
                    self.done(o)

        _in_slots(slot, workers, self.stopping)

    # with a catalog: the slots claim jobs from the shared queue

    def drain(self, envs: dict[str, list[dict[str, str]]], workers: int) -> None:
        assert self.catalog is not None
        catalog = self.catalog

        def slot(i: int) -> None:
            while not self.stopping.is_set() and (c := self._claim()) is not None:
                self._work(catalog, c, envs, i)

        _in_slots(slot, workers, self.stopping)

    def _claim(self) -> Claim | None:
        assert self.catalog is not None
        for fp_id in sorted(self.by_fp):
            with self.lock:
                exclude = set(self.refused)
            c = self.catalog.claim(self.worker, lease_s=self.settings.lease.lease_s, fingerprint_id=fp_id,
                                   exclude=exclude)
            if c is not None:
                return c
        return None

    def _work(self, catalog: Catalog, c: Claim, envs: dict[str, list[dict[str, str]]], slot: int) -> None:
        tc = self.by_fp[c.fingerprint_id]
        entry = self.plan.get((c.fingerprint_id, c.entry_key))
        if entry is None:  # queued by another config's worker: its payload says what to build
            try:
                entry = payload.decode(c.payload, f"{c.fingerprint_id}/{c.entry_key}")
            except QueuePayloadError as exc:
                with self.lock:
                    self.refused.add(c.entry_key)
                catalog.fail(c, exc.message, retry=True)   # back to pending, for a worker that reads it
                self.done(Outcome(c.entry_key[:12], c.entry_key, c.fingerprint_id, "refused", detail=exc.message))
                return
        try:
            with Heartbeat(catalog, c, self.settings.lease) as hb:
                o: Outcome | None
                if published_since(entry, tc, self.store, catalog):
                    o = _outcome(entry, tc, "present")
                else:
                    o = self.build(entry, tc, _slot_env(envs, entry.spec.backend, slot), stop=hb.lost)
        except BaseException:   # interrupted here (one slot runs in the main thread) or failed: let it go
            self.stopping.set()
            release(catalog, c)
            raise
        if o is None and self.stopping.is_set():
            release(catalog, c)
            return
        if o is None or hb.lost.is_set():
            return   # the lease was lost: the worker holding it now reports the entry
        if o.status == "failed":
            catalog.fail(c, o.detail[-2000:], retry=False)
        else:
            catalog.finish(c, o.detail if o.status == "built" else "")
        self.done(o)

    def settle(self, wanted: list[MatrixEntry]) -> tuple[list[Outcome], int]:
        """Outcomes of wanted entries this worker did not report: (done/failed elsewhere, held live) and
        how many are claimable again (a lease ran out, a requeue)."""
        assert self.catalog is not None
        with self.lock:
            reported = {(o.fingerprint_id, o.key) for o in self.report.outcomes}
        out: list[Outcome] = []
        claimable = 0
        now = dt.datetime.now(dt.UTC)
        for fp_id, tc in self.by_fp.items():
            group = [e for e in wanted if tc.fingerprint.id == fp_id and (fp_id, e.spec.key) not in reported]
            if not group:
                continue
            states = self.catalog.job_states(fp_id, [e.spec.key for e in group])
            for e in group:
                job = states.get(e.spec.key)
                if job is None or job.status == "pending":
                    claimable += e.spec.key not in self.refused
                elif job.status == "done":
                    out.append(_outcome(e, tc, "present", detail=f"built by {job.worker}"))
                elif job.status == "failed":
                    out.append(_outcome(e, tc, "failed", detail=f"failed on {job.worker}: {job.last_error or ''}"))
                elif job.lease_expires_at is not None and job.lease_expires_at < now:
                    claimable += 1
                else:
                    out.append(_outcome(e, tc, "held", detail=f"held by {job.worker}", holder=job.worker or "?"))
        return out, claimable


class AnyOf:
    """Set when any of its events is (what `run_build_process` polls as its `stop`)."""

    def __init__(self, *events: threading.Event | None) -> None:
        self.events = [e for e in events if e is not None]

    def is_set(self) -> bool:
        return any(e.is_set() for e in self.events)


def release(catalog: Catalog, c: Claim) -> None:
    """Hand a claim back to the queue at once (interrupted): pending again, for the next worker. Fenced by
    the claim's attempt, so a lease already taken over is left alone; a catalog that does not answer
    leaves it to the lease's expiry (or, on this host, to the dead-process check)."""
    from ..errors import CatalogError

    with contextlib.suppress(CatalogError):
        catalog.fail(c, "interrupted: its worker was stopped (SIGINT/SIGTERM) before it finished", retry=True)


def _slot_env(envs: dict[str, list[dict[str, str]]], backend: str, slot: int) -> dict[str, str]:
    slots = envs.get(backend) or [{}]
    return slots[slot % len(slots)]


def _in_slots(slot: Callable[[int], None], workers: int, stopping: threading.Event) -> None:
    """Run `slot(i)` for each build slot. An interrupt reaches the main thread only: it sets `stopping`,
    so every slot kills its build, releases its claim and returns before this re-raises."""
    if workers <= 1:
        slot(0)
        return
    with ThreadPoolExecutor(workers, thread_name_prefix="ck-build-slot") as pool:
        futures = [pool.submit(slot, i) for i in range(workers)]
        try:
            for f in futures:
                f.result()
        except BaseException:
            stopping.set()
            raise


def prebuild(config: Config, store: Store, *, catalog: Catalog | None = None, backends: set[str] | None = None,
             models: set[str] | None = None, only: set[str] | None = None,
             settings: RunSettings | None = None,
             progress: Callable[[Outcome], None] | None = None) -> PrebuildReport:
    settings = settings or RunSettings()
    entries = config.entries(backends, models)
    if only:
        entries = [e for e in entries if e.spec.key in only or e.spec.key[:12] in only]
    config.require_model_paths(models)
    tcs = toolchains(config, entries)
    workers = settings.workers if settings.workers is not None else config.build_workers
    setting = "build.workers" if settings.workers is None else "--workers"
    envs = {name: slot_envs(tc.backend, tc.options, workers, config.source, setting) for name, tc in tcs.items()}
    if settings.shard is not None:
        entries = shard_entries(entries, tcs, settings.shard, store, catalog)
    report = PrebuildReport(swept=sweep_stale(settings.workdir_root), planned=len(entries))
    run = _BuildSlots(config, store, catalog, tcs, settings, progress, report)

    todo, present = split_built(entries, tcs, store, catalog, verify_store=settings.verify_store)
    for o in present:
        run.done(o)
    if catalog is None:
        run.walk(todo, envs, workers)
        return report
    run.plan = {(tcs[e.spec.backend].fingerprint.id, e.spec.key): e for e in todo}
    catalog.enqueue((fp, key, payload.encode(e)) for (fp, key), e in run.plan.items())
    catalog.requeue(run.plan)
    backoff = Backoff(settings.wait_poll_s)
    while True:
        before = len(report.outcomes)
        run.drain(envs, workers)
        settled, claimable = run.settle(todo)
        if len(report.outcomes) != before:
            backoff.reset()
        if claimable:
            if len(report.outcomes) == before:   # clocks disagree on an expiry by a moment: do not spin
                time.sleep(min(settings.wait_poll_s, 0.5))
            continue
        if any(o.status == "held" for o in settled) and settings.wait:
            backoff.sleep()
            continue
        for o in settled:
            run.done(o)
        return report


def held_summary(outcomes: Iterable[Outcome]) -> str:
    """`3 entries (w1, w2)`: who holds what, for the one-line message."""
    held = list(outcomes)
    holders = sorted({o.holder for o in held})
    return f"{len(held)} entr{'y' if len(held) == 1 else 'ies'} ({', '.join(holders[:5])}" + \
        (", ...)" if len(holders) > 5 else ")")
