"""What the served dir holds, as the compile ledger judges a compile by it: the entries hydrate placed there
(its state file), hot first's markers, and, when the process was given its config, the matrix.

    verdict = judge(hint, model, backend, shape, ServedDir.read(path), matrix)

`judge` is pure. It names the reason a call compiled (reports/compiles.py), the entry that would have served
it, and the fix: a shape the matrix lacks is added to the matrix; an entry the dir lacks is prebuilt; an
entry hot first has not placed yet is waited for (the dest's `complete` marker). Without the config the
entry cannot be named, and a compile during partial readiness is "not yet hydrated".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..format.spec import EntrySpec, Shape
from ..reports.compiles import AUTOTUNE, FALLBACK, FINGERPRINT, NO_ARTIFACT, NOT_HYDRATED, RECOMPILE
from ..reports.miss import serving_batches

if TYPE_CHECKING:
    from ..config import Config


@dataclass(frozen=True)
class Planned:
    model: str
    backend: str
    shape: Shape
    key: str
    spec: EntrySpec


@dataclass(frozen=True)
class Matrix:
    """The config's entries, by model, backend and shape (what a call is matched against)."""

    entries: tuple[Planned, ...]
    source: str = ""

    @classmethod
    def of(cls, config: Config) -> Matrix:
        return cls(tuple(Planned(e.spec.model, e.spec.backend, e.spec.shape, e.spec.key, e.spec)
                         for e in config.entries()), config.source)

    def keys_for(self, model: str, backend: str, shape: Shape) -> list[str]:
        """The entries that serve a call of `shape`: its batch, or the batch guidance doubles."""
        batches = serving_batches(shape.batch)
        return [p.key for p in self.entries if p.model == model and p.backend == backend
                and (p.shape.height, p.shape.width) == (shape.height, shape.width) and p.shape.batch in batches]

    def would_be(self, model: str, backend: str, shape: Shape) -> str | None:
        """The key the model's entry would have at `shape` once the matrix lists it (its first entry of this
        backend, at that shape), or None for a model the matrix does not have."""
        first = next((p.spec for p in self.entries if p.model == model and p.backend == backend), None)
        return dataclasses.replace(first, shape=shape).key if first is not None else None

    def backend_of(self, model: str) -> str | None:
        """The model's one backend in the matrix (None: not in it, or several)."""
        names = {p.backend for p in self.entries if p.model == model}
        return names.pop() if len(names) == 1 else None


@dataclass(frozen=True)
class ServedDir:
    """The dir a runtime's env names, as hydrate left it (all empty for a dir hydrate never filled)."""

    path: Path | None
    placed: frozenset[str] = frozenset()      # entry keys its state file lists
    ready: frozenset[str] | None = None       # hot first's ready entries; None: no ready marker
    complete: bool = False

    @property
    def partial(self) -> bool:
        """Hot first is still placing entries: the ready marker is there, the complete one not yet."""
        return self.ready is not None and not self.complete

    @property
    def marker_dir(self) -> Path | None:
        """Where the markers are: the dest's own records, beside the toolchain dir the env names."""
        return None if self.path is None else self.path.parent / ".cachekeeper"

    @classmethod
    def read(cls, path: Path | None) -> ServedDir:
        if path is None:
            return cls(None)
        from ..errors import DestStateError
        from ..hydration.state import hot_first_marks, read_state

        try:
            state = read_state(path)[0]
        except DestStateError:
            state = None
        marks = [hot_first_marks(d) for d in (path.parent, path)]   # a toolchain dir's dest, or a flat dest
        ready = next((set(r) for r, _ in marks if r is not None), None)
        return cls(path, frozenset(state.manifests) if state else frozenset(),
                   frozenset(ready) if ready is not None else None, any(done for _, done in marks))


@dataclass(frozen=True)
class Verdict:
    reason: str
    key: str | None           # the entry that would have served the call (None: unknown)
    why: str                  # the reason, for this call
    fix: str
    planned: bool = True      # False: `key` is the entry the shape would have once added to the matrix


def judge(hints: Sequence[str], model: str, backend: str, shape: Shape | None, served: ServedDir,
          matrix: Matrix | None) -> Verdict:
    """Why a call compiled. `hints` are what the hooks saw (fallback, autotune, recompile)."""
    keys = matrix.keys_for(model, backend, shape) if matrix is not None and shape is not None else []
    key = next((k for k in keys if k in served.placed), keys[0] if keys else None)
    known = matrix is not None and shape is not None
    label = shape.label() if shape is not None else "this shape"
    if served.partial and (key not in served.placed if key else not known):
        where = served.marker_dir / "complete" if served.marker_dir else "the complete marker"
        return Verdict(NOT_HYDRATED, key, "its entry is not hydrated yet (hot first has placed only the hottest "
                       "entries)", f"wait for {where} before serving {label} (or hydrate without hot first)")
    for hint, why, fix in ((FALLBACK, "the precompiled function did not serve the call, its torch.compile fallback "
                            "did", "prebuild the aot entry for this toolchain (the warning above names why)"),
                           (AUTOTUNE, "an autotune benchmark ran", "prebuild with the autotune mode the server uses")):
        if hint in hints:
            return Verdict(hint, key, why, fix)
    if key is not None and key in served.placed:
        return Verdict(FINGERPRINT, key, f"entry {key} is in the served dir, but the runtime's key did not take "
                       "it", "serve with the build's env and flags (the device check compares them), then prebuild "
                       "again")
    if RECOMPILE in hints and key is None and not known:
        return Verdict(RECOMPILE, None, "a guard failed (another shape or argument than the warm-up), and the new "
                       "graph was not in the cache", "add the shape to the matrix and prebuild it")
    if key is not None:
        return Verdict(NO_ARTIFACT, key, f"entry {key} is not in the served dir (not built for this toolchain, or "
                       "removed)", f"prebuild entry {key} for this toolchain and hydrate again")
    if known and matrix is not None and shape is not None:
        return Verdict(NO_ARTIFACT, matrix.would_be(model, backend, shape), f"no entry of {matrix.source} has "
                       f"model {model} at {label}", f"add {label} to model {model}'s shapes and prebuild it",
                       planned=False)
    return Verdict(NO_ARTIFACT, None, "no artifact for this call in the served dir",
                   f"add {label} to the model's shapes in the matrix and prebuild it")


__all__ = ["Matrix", "ServedDir", "Verdict", "judge"]
