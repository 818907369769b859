"""The canary: before a rollout, on a freshly hydrated host, replay each matrix entry's warm-up (as the build
ran it) against the hydrated dir under strict mode `fail`, and name every shape that would compile.

    cachekeeper canary --config ck.yaml --dest /cache/inductor     # exit 15 naming each shape, 0 when none

Each replay is the backend's own build module (the same loader, placement, compile call and warm-up call the
build made, as the device check's server is), run through `python -m cachekeeper.runtime.replay` with
CACHEKEEPER_STRICT=fail, on a copy of the served dir made of hard links (a copy where links cannot be made):
what a replay writes by temp file and rename, as every runtime cachekeeper ships does, never reaches the dir the
server reads, so a canary that compiled cannot make the next one pass; a replay that writes a file in place
(through its link) fails, and says which hydrated files it changed. An entry passes when the replay exits 0,
the runtime counted no compile and no artifact was added or rewritten; else the verdict names the reason
(runtime/served.py: not in the dir, in it but not taken, not placed yet) and the child's own error line. A
dest that holds no dir for this host's toolchain fails every entry without a replay.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .. import settings
from ..backends.base import CACHE_ROOT, BuildJob
from ..config.model import Config, MatrixEntry
from ..errors import CanaryFailed
from ..format.spec import Shape
from ..runtime.miss_watch import cache_counts, new_files
from ..runtime.served import Matrix, ServedDir, judge

REPLAY = "cachekeeper.runtime.replay"
ERROR_PREFIX = "cachekeeper-build: error: "
DEFAULT_TIMEOUT = 1800.0
SKIP_DIRS = ("ck-aot", "locks")   # the aot build's own record of what it loaded; runtime locks


@dataclass(frozen=True)
class Replay:
    """One entry's replay and its verdict."""

    model: str
    shape: str
    key: str
    mode: str
    ok: bool
    compiled: int           # compiles the runtime counted (or artifacts added, without counters)
    wrote: int              # artifacts the replay added to its copy of the dir
    reason: str = ""        # the ledger's reason, for an entry that would compile
    detail: str = ""        # the verdict's why and fix, and the replay's own error line
    seconds: float = 0.0

    def line(self) -> str:
        head = f"  {'ok' if self.ok else 'FAIL':<5} {self.model} {self.shape:<12} {self.mode:<16} entry {self.key}"
        return f"{head} ({self.seconds:.1f} s)" if self.ok else f"{head}: would compile ({self.reason}): {self.detail}"

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__, seconds=round(self.seconds, 3))


@dataclass(frozen=True)
class CanaryResult:
    backend: str
    fingerprint: str
    served: Path
    replays: tuple[Replay, ...]

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.replays)

    def lines(self) -> list[str]:
        failed = sum(not r.ok for r in self.replays)
        head = f"canary: {self.backend} toolchain {self.fingerprint} on {self.served}"
        return [f"{head}: {_n(len(self.replays), 'entry')} replayed under strict mode fail, {failed} would compile",
                *(r.line() for r in self.replays)]

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "fingerprint": self.fingerprint, "served": str(self.served),
                "ok": self.ok, "entries": [r.to_json() for r in self.replays]}


def _n(count: int, noun: str) -> str:
    return f"{count} {noun if count == 1 else noun.removesuffix('y') + 'ies' if noun.endswith('y') else noun + 's'}"


def failure(results: Sequence[CanaryResult]) -> CanaryFailed | None:
    """One error naming each shape that would compile, or None when every replay passed."""
    bad = [(res, r) for res in results for r in res.replays if not r.ok]
    if not bad:
        return None
    named = "; ".join(f"{r.model} {r.shape} on {res.backend} (entry {r.key}: {r.reason})" for res, r in bad)
    total = sum(len(res.replays) for res in results)
    exc = CanaryFailed(f"canary: {len(bad)} of {_n(total, 'entry')} would compile on this host: {named}",
                       key=bad[0][1].key, path=str(bad[0][0].served),
                       fingerprint=bad[0][0].fingerprint)
    exc.compiled = any(r.compiled for _, r in bad)
    return exc


# --- the served dir and its copy ---------------------------------------------------------------------


def served_for(dest: Path, fingerprint_id: str) -> Path | None:
    """This toolchain's dir under the dest (or a flat dest of this toolchain); None when hydrate left none."""
    from ..hydration.destdir import resolve_dest, toolchain_dir
    from ..hydration.state import read_state

    root = resolve_dest(dest)
    mine = toolchain_dir(root, fingerprint_id)
    if mine.is_dir() and not mine.is_symlink():
        return mine
    state = read_state(root)[0] if root.is_dir() else None
    return root if state is not None and state.fingerprint_id == fingerprint_id else None


Linked = dict[str, tuple[int, int, int]]   # relpath -> (inode, size, mtime_ns) of a file linked, not copied


def link_copy(src: Path, dst: Path) -> Linked:
    """`src`'s tree at `dst`, each file a hard link where the filesystem allows, else a copy; what was linked."""
    linked: Linked = {}
    for here, dirs, files in os.walk(src):
        rel = Path(here).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        dirs[:] = [d for d in dirs if not (Path(here) / d).is_symlink()]
        for name in files:
            source, target = Path(here) / name, dst / rel / name
            if source.is_symlink():
                continue
            try:
                os.link(source, target)
            except OSError:
                shutil.copy2(source, target)
                continue
            st = os.lstat(target)
            linked[(rel / name).as_posix()] = (st.st_ino, st.st_size, st.st_mtime_ns)
    return linked


def rewritten(root: Path, linked: Linked) -> list[str]:
    """Files the replay wrote in place through a link (the runtimes cachekeeper ships write a temp and rename,
    which leaves the link alone; one that writes in place changed the hydrated file too)."""
    out = []
    for rel, (inode, size, mtime) in linked.items():
        with contextlib.suppress(OSError):
            st = os.lstat(root / rel)
            if st.st_ino == inode and (st.st_size, st.st_mtime_ns) != (size, mtime):
                out.append(rel)
    return sorted(out)


@contextlib.contextmanager
def work_copy(served: Path) -> Iterator[tuple[Path, Linked]]:
    """A private copy of the served dir, beside it when possible (same filesystem: links), removed after."""
    try:
        work = Path(tempfile.mkdtemp(prefix="ck-canary-", dir=served.parent.parent))
    except OSError:
        work = Path(tempfile.mkdtemp(prefix="ck-canary-"))
    try:
        yield work, link_copy(served, work / "cache")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def artifact_counts(root: Path) -> dict[str, int]:
    """Complete files per dir under `root`, without the dirs a replay may write that are not compiles."""
    return {d: n for d, n in cache_counts([root]).items()
            if not any(part in SKIP_DIRS for part in Path(d).relative_to(root).parts)}


# --- one replay ----------------------------------------------------------------------------------------


def replay_command(argv: Sequence[str]) -> list[str]:
    """The build command with its module (the last `-m MODULE`, also under torchrun) run through the replay
    wrapper, which turns strict mode on before the module's first line."""
    last = max((i for i, a in enumerate(argv[:-1]) if a == "-m"), default=None)
    if last is None:
        raise ValueError(f"the build command runs no `-m MODULE`: {' '.join(argv)}")
    return [*argv[:last], "-m", REPLAY, *argv[last + 1:]]


def compiled_of(result: Mapping[str, Any]) -> int:
    """Compiles a build result counts: a device runtime's `compiled`, else Inductor's cache misses."""
    counters = result.get("counters") or {}
    if "compiled" in counters:
        return int(counters.get("compiled") or 0)
    return int(counters.get("fxgraph_cache_miss") or 0) + int(counters.get("autograd_cache_miss") or 0)


REFUSALS = ("CompileRefused: ", "NotYetHydrated: ")   # strict mode's error, as a traceback shows it


def error_line(stderr: str) -> str:
    """The replay's own word: strict mode's error (Dynamo wraps it: its line in the traceback), else the build's
    `error:` line, else its last line."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    refused = [ln.split(p, 1)[1] for ln in lines for p in REFUSALS if p in ln]
    errors = [ln.removeprefix(ERROR_PREFIX) for ln in lines if ln.startswith(ERROR_PREFIX)]
    return (refused or errors or lines or ["no output"])[-1][:2000]


def _run_one(tc: Any, entry: MatrixEntry, work: Path, timeout: float) -> tuple[int, dict[str, Any], str, int]:
    """(exit code, result, error line, artifacts added) of one replay in `work`."""
    roots = {CACHE_ROOT: str(work / "cache"), **{k: str(v) for k, v in tc.backend.extra_roots(tc.options).items()}}
    job = BuildJob(entry.spec, entry.model, roots, dict(tc.options), str(work / "result.json"))
    cmd = tc.backend.build_command(job)
    env = {**cmd.env, settings.STRICT.name: "fail", settings.MODEL.name: entry.spec.model}
    before = artifact_counts(work / "cache")
    try:
        proc = subprocess.run(replay_command(cmd.argv), env=env, cwd=work, capture_output=True, text=True,
                              timeout=timeout, check=False)
        code, err = proc.returncode, error_line(proc.stderr or proc.stdout)
    except subprocess.TimeoutExpired:
        code, err = 124, f"the replay did not end within {timeout:g} s"
    added = new_files(before, artifact_counts(work / "cache"))
    result = json.loads((work / "result.json").read_text()) if (work / "result.json").is_file() else {}
    return code, result, err, added


def replay(tc: Any, entry: MatrixEntry, served: Path, matrix: Matrix, timeout: float) -> Replay:
    spec = entry.spec
    t0 = time.perf_counter()
    with work_copy(served) as (work, linked):
        code, result, err, added = _run_one(tc, entry, work, timeout)
        changed = rewritten(work / "cache", linked)
    compiled = compiled_of(result)
    base = Replay(spec.model, spec.shape.label(), spec.key, spec.mode, True, compiled, added + len(changed),
                  seconds=time.perf_counter() - t0)
    if code == 0 and not compiled and not base.wrote:
        return base
    verdict = judge((), spec.model, spec.backend, spec.shape, ServedDir.read(served), matrix)
    said = f"; the replay: {_head(err)}" if code else \
        f"; the replay counted {compiled} compiles and wrote {added} files"
    if changed:   # through the links: the hydrated dir's own files changed (a next hydrate re-verifies them)
        said += f"; it rewrote {len(changed)} hydrated files in place ({', '.join(changed[:3])}): hydrate again"
    return replace(base, ok=False, reason=verdict.reason, detail=f"{verdict.why}; fix: {verdict.fix}{said}")


def _head(error: str) -> str:
    """A strict error's head ("strict: model M (...) would compile on B"; its why and fix are the canary's own),
    or the replay's whole line."""
    found = re.match(r"(strict: .*? (?:would compile|compiled) on [\w.-]+)", error)
    return found.group(1) if found else error


def unhydrated(entries: Iterable[MatrixEntry], fingerprint_id: str) -> tuple[Replay, ...]:
    why = (f"the dest holds no dir for this host's toolchain {fingerprint_id}; fix: hydrate it (with this image) "
           "before the canary")
    return tuple(Replay(e.spec.model, e.spec.shape.label(), e.spec.key, e.spec.mode, False, 0, 0, "no_artifact", why)
                 for e in entries)


# --- the canary ----------------------------------------------------------------------------------------


def with_shapes(entries: list[MatrixEntry], shapes: Sequence[Shape]) -> list[MatrixEntry]:
    """The matrix's entries, and for each extra shape (one the servers will be asked for) one entry per model,
    backend, mode and dtype of the matrix at that shape (not in the matrix: the canary shows it compiles)."""
    seen = {e.spec.key for e in entries}
    extra = []
    for shape in shapes:
        for e in entries:
            spec = replace(e.spec, shape=shape)
            if spec.key not in seen:
                seen.add(spec.key)
                extra.append(MatrixEntry(spec, e.model))
    return entries + extra


def run_canary(config: Config, dest: Path, *, backends: Sequence[str] | None = None,
               models: Sequence[str] | None = None, options: Mapping[str, str] | None = None,
               device: str | None = None, shapes: Sequence[Shape] = (),
               timeout: float = DEFAULT_TIMEOUT) -> list[CanaryResult]:
    """Replay every entry of `config` (its backends, filtered) for this host's toolchains against `dest`."""
    from ..backends.host import host_toolchain
    from ..bounds import BUILD_TIMEOUT, checked

    timeout = float(checked(timeout, BUILD_TIMEOUT, "run_canary(timeout=...)"))
    results = []
    matrix = Matrix.of(config)
    for name in backends or config.backend_names():
        tc = host_toolchain(config, name, options, device)
        entries = with_shapes(config.entries(backends=[name], models=models), shapes)
        served = served_for(dest, tc.fingerprint.id)
        if served is None or not ServedDir.read(served).placed:
            results.append(CanaryResult(name, tc.fingerprint.id, served or dest, unhydrated(entries,
                                                                                         tc.fingerprint.id)))
            continue
        results.append(CanaryResult(name, tc.fingerprint.id, served,
                                    tuple(replay(tc, e, served, matrix, timeout) for e in entries)))
    return results


__all__ = ["CanaryResult", "Replay", "failure", "replay_command", "run_canary"]
