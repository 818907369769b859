"""Prebuild: plan the matrix for this host's toolchains, build what is missing, publish it.

With a catalog, entries go through its queue (`claim` with a lease), so any number of workers on any
number of machines build each (toolchain, entry) once; a worker only claims jobs of toolchains it has.
Without one, the worker walks its plan alone. Either way an entry already in the store is not rebuilt.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..backends import get_backend
from ..backends.base import Backend, BuildJob, ModelRef
from ..config import Config, PlannedEntry
from ..errors import BackendUnavailable
from ..fingerprint import Fingerprint
from ..manifest import Manifest, manifest_key
from ..publish import publish
from ..spec import EntrySpec
from ..stores.base import Store
from .runner import run_build

if TYPE_CHECKING:
    from ..catalog import Catalog, Claim
    from ..signing import SigningKey


@dataclass(frozen=True)
class Outcome:
    label: str
    key: str
    fingerprint_id: str
    status: str                 # "built" | "present" | "failed"
    seconds: float = 0.0
    detail: str = ""            # failure reason and log tail, or the manifest digest


@dataclass
class PrebuildReport:
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.outcomes:
            out[o.status] = out.get(o.status, 0) + 1
        return out


@dataclass(frozen=True)
class Toolchain:
    backend: Backend
    fingerprint: Fingerprint
    options: dict[str, str]


def toolchains(config: Config, entries: list[PlannedEntry]) -> dict[str, Toolchain]:
    """This host's fingerprint for each backend the plan uses; an unusable backend stops the run."""
    out: dict[str, Toolchain] = {}
    for name in sorted({e.spec.backend for e in entries}):
        backend = get_backend(name)
        options = config.options_for(name)
        reason = backend.unavailable_reason(options)
        if reason:
            raise BackendUnavailable(f"backend {name} cannot build on this host: {reason}")
        out[name] = Toolchain(backend, backend.fingerprint(options), options)
    return out


def _payload(entry: PlannedEntry) -> str:
    return json.dumps({"spec": entry.spec.to_dict(), "model": entry.model.to_dict()}, sort_keys=True)


def _from_payload(payload: str) -> PlannedEntry:
    d = json.loads(payload)
    return PlannedEntry(EntrySpec.from_dict(d["spec"]), ModelRef(**d["model"]))


def already_published(entry: PlannedEntry, tc: Toolchain, store: Store, catalog: Catalog | None) -> Outcome | None:
    """A "present" outcome (indexed in the catalog) if the store has the entry; None if it must be built."""
    key = manifest_key(tc.fingerprint.id, entry.spec.key)
    if not store.exists(key):
        return None
    if catalog is not None:
        catalog.record(Manifest.from_bytes(store.get_bytes(key), source=key), store_url=store.url)
    return Outcome(entry.spec.label(), entry.spec.key, tc.fingerprint.id, "present")


def build_entry(entry: PlannedEntry, tc: Toolchain, store: Store, *, catalog: Catalog | None, timeout: float,
                workdir_root: Path | None = None, on_tick: Callable[[], object] | None = None,
                signing_key: SigningKey | None = None) -> Outcome:
    """Compile and publish one entry (the caller has checked it is not in the store yet)."""
    spec, fp = entry.spec, tc.fingerprint
    workdir = Path(tempfile.mkdtemp(prefix="ck-build-", dir=workdir_root))
    try:
        roots = tc.backend.build_roots(workdir)
        for root in roots.values():
            root.mkdir(parents=True, exist_ok=True)
        job = BuildJob(spec, entry.model, {k: str(v) for k, v in roots.items()}, tc.options,
                       result_path=str(workdir / "result.json"))
        res = run_build(tc.backend.build_command(job), timeout=timeout, log_path=workdir / "build.log",
                        cwd=workdir, on_tick=on_tick)
        if not res.ok:
            return Outcome(spec.label(), spec.key, fp.id, "failed", res.seconds,
                           f"build {res.describe()}\n{res.log_tail}")
        result = json.loads((workdir / "result.json").read_text()) if (workdir / "result.json").exists() else {}
        build = {"host": socket.gethostname(), "seconds": round(res.seconds, 3), "result": result,
                 "built_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
        if not any(f.is_file() for r in roots.values() for f in r.rglob("*")):
            return Outcome(spec.label(), spec.key, fp.id, "failed", res.seconds,
                           f"build wrote no artifacts\n{res.log_tail}")
        pr = publish(store, fingerprint=fp, spec=spec, roots=roots, include=tc.backend.include,
                     shared_roots=tc.backend.shared_roots, build=build, catalog=catalog, signing_key=signing_key)
        status = "built" if pr.created else "present"
        return Outcome(spec.label(), spec.key, fp.id, status, res.seconds, pr.manifest.digest)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _claims(catalog: Catalog, worker: str, fp_id: str, lease_s: float) -> Iterator[Claim]:
    while (claim := catalog.claim(worker, lease_s=lease_s, fingerprint_id=fp_id)) is not None:
        yield claim


def prebuild(config: Config, store: Store, *, catalog: Catalog | None = None, backends: set[str] | None = None,
             models: set[str] | None = None, only: set[str] | None = None, worker: str | None = None,
             lease_s: float = 600.0, workdir_root: Path | None = None,
             progress: Callable[[Outcome], None] | None = None,
             signing_key: SigningKey | None = None) -> PrebuildReport:
    entries = config.entries(backends, models)
    if only:
        entries = [e for e in entries if e.spec.key in only or e.spec.key[:12] in only]
    config.require_model_paths(models)
    tcs = toolchains(config, entries)
    report = PrebuildReport()

    def done(o: Outcome) -> None:
        report.outcomes.append(o)
        if progress is not None:
            progress(o)

    todo: list[PlannedEntry] = []
    for e in entries:  # entries already in the store are reported, indexed, and never rebuilt
        present = already_published(e, tcs[e.spec.backend], store, catalog)
        if present is not None:
            done(present)
        else:
            todo.append(e)
    if catalog is None:
        for e in todo:
            done(build_entry(e, tcs[e.spec.backend], store, catalog=None, timeout=config.build_timeout,
                             workdir_root=workdir_root, signing_key=signing_key))
        return report
    worker = worker or f"{socket.gethostname()}:{os.getpid()}"
    catalog.enqueue((tcs[e.spec.backend].fingerprint.id, e.spec.key, _payload(e)) for e in todo)
    catalog.requeue((tcs[e.spec.backend].fingerprint.id, e.spec.key) for e in todo)
    for tc in tcs.values():
        for claim in _claims(catalog, worker, tc.fingerprint.id, lease_s):
            entry = _from_payload(claim.payload)
            # Another worker may have published it since it was queued (e.g. from another config).
            o = already_published(entry, tc, store, catalog) or build_entry(
                entry, tc, store, catalog=catalog, timeout=config.build_timeout, workdir_root=workdir_root,
                on_tick=functools.partial(catalog.renew, claim, lease_s), signing_key=signing_key)
            if o.status == "failed":
                catalog.fail(claim, o.detail[-2000:], retry=False)
            else:
                catalog.finish(claim, o.detail if o.status == "built" else "")
            done(o)
    return report
