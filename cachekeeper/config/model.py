"""The validated config as values: models with their matrices, and the matrix expanded into entries.

Pure: nothing here reads files or YAML (config/schema.py builds these), so code may also build a
ModelMatrix directly. The order of entries() is part of the contract: the same in every process.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..backends import compile_modes_for, mode_key_options
from ..errors import ConfigError
from ..format.spec import (
    COMPILE_MODE,
    DEFAULT_COMPILE_MODE,
    EntrySpec,
    ModelRef,
    Shape,
    default_warmup,
    warmup_options,
)
from .hydrate import HydrateOptions


@dataclass(frozen=True)
class MatrixEntry:
    """One cell of the expanded matrix: what to build (the spec, whose key names it) and what to load."""

    spec: EntrySpec
    model: ModelRef


@dataclass(frozen=True)
class ModelMatrix:
    """One model and the matrix it is built for (top-level defaults merged with per-model overrides)."""

    model: ModelRef
    backends: tuple[str, ...]                    # sorted
    modes: tuple[str, ...]                       # sorted union over backends; see modes_for
    dtypes: tuple[str, ...]                      # sorted
    shapes: tuple[Shape, ...]                    # sorted, as written: entries() doubles batch under guidance
    backend_modes: tuple[tuple[str, tuple[str, ...]], ...] = ()   # per-backend modes (mapping form)
    line: int = 0                                # line of the model's name in the config
    path_line: int = 0                           # line of its `path` (local models)
    priority: int = 0                            # hydrate places higher first (`--ready-after`)
    compile_modes: tuple[str, ...] = (DEFAULT_COMPILE_MODE,)   # torch.compile modes the server uses, sorted

    @property
    def guidance(self) -> bool:
        """Classifier-free guidance: the compiled batch is 2 x batch (the model's setting, read once)."""
        return self.model.guidance

    def modes_for(self, backend: str) -> tuple[str, ...]:
        return dict(self.backend_modes).get(backend, self.modes)

    def compiled_shapes(self) -> tuple[Shape, ...]:
        if not self.guidance:
            return self.shapes
        return tuple(Shape(s.height, s.width, 2 * s.batch) for s in self.shapes)

    def warmup_for(self, mode: str) -> str:
        m = self.model
        return m.warmup or default_warmup(mode)

    def key_options(self, backend: str, mode: str = "full",
                    compile_mode: str = DEFAULT_COMPILE_MODE) -> tuple[tuple[str, str], ...]:
        """The entry's graph-changing options, which go into its key (sorted, as EntrySpec wants).
        Not the config's `backend_options`: those go into the toolchain fingerprint."""
        m = self.model
        warmup = self.warmup_for(mode)
        out = warmup_options(warmup, guidance=self.guidance,
                             max_sequence_length=m.max_sequence_length, offload=m.offload)
        if m.tensor_parallel > 1:
            out["tp"] = str(m.tensor_parallel)
        if compile_mode != DEFAULT_COMPILE_MODE:
            out[COMPILE_MODE] = compile_mode
        out.update(mode_key_options(backend, mode, pipeline=warmup == "pipeline"))
        return tuple(sorted(out.items()))

    def compile_modes_for(self, backend: str, mode: str) -> tuple[str, ...]:
        """The listed torch.compile modes `backend` takes in compile `mode`; one that takes none of them
        builds once, as "default"."""
        taken = compile_modes_for(backend, mode)
        return tuple(c for c in self.compile_modes if c in taken) or (DEFAULT_COMPILE_MODE,)

    def entries(self) -> list[MatrixEntry]:
        """backend, mode, compile mode, dtype, shape: each sorted, so the order is the same in every process."""
        m = self.model
        return [
            MatrixEntry(EntrySpec(model=m.name, component=m.component, backend=backend, mode=mode, shape=shape,
                                  dtype=dtype, revision=m.revision,
                                  options=self.key_options(backend, mode, compile_mode)),
                        m)
            for backend in sorted(self.backends)
            for mode in sorted(self.modes_for(backend))
            for compile_mode in self.compile_modes_for(backend, mode)
            for dtype in sorted(self.dtypes)
            for shape in sorted(self.compiled_shapes())
        ]


@dataclass(frozen=True)
class Config:
    source: str                                   # file path (for messages)
    models: tuple[ModelMatrix, ...]
    backend_options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    store: str | None = None                      # absolute file:// URL, s3:// or gs://
    catalog: str | None = None                    # SQLAlchemy URL; sqlite paths made absolute
    build_timeout: float = 1800.0
    build_workers: int = 1
    capture: str = "report"                       # "publish": serving hosts may write captured sets
    strict: str = "off"                           # serving processes' strict mode: off | report | fail
    hydrate: HydrateOptions = field(default_factory=HydrateOptions)   # the `hydrate:` section (flags win)

    @property
    def capture_publish(self) -> bool:
        return self.capture == "publish"

    def entries(self, backends: Collection[str] | None = None,
                models: Collection[str] | None = None) -> list[MatrixEntry]:
        """The expanded matrix: models in file order, then backend, mode, dtype, shape sorted."""
        want_backends = self._check_filter("backend", backends, self.backend_names())
        want_models = self._check_filter("model", models, self.model_names())
        return [e for m in self.models if want_models is None or m.model.name in want_models
                for e in m.entries() if want_backends is None or e.spec.backend in want_backends]

    def backend_options_for(self, backend: str) -> dict[str, str]:
        """The backend's `backend_options` (toolchain settings that feed its fingerprint), as a copy."""
        return dict(self.backend_options.get(backend, {}))

    def model_names(self) -> list[str]:
        return [m.model.name for m in self.models]

    def backend_names(self) -> list[str]:
        return sorted({b for m in self.models for b in m.backends})

    def model(self, name: str) -> ModelMatrix:
        for m in self.models:
            if m.model.name == name:
                return m
        raise ConfigError(f"{self.source}: no model named {name!r} (models: {', '.join(self.model_names())})",
                          path=self.source)

    def model_line(self, name: str) -> int:
        """Where the model is declared, so later failures (a build, a missing folder) can point at it."""
        return self.model(name).line

    def require_model_paths(self, models: Collection[str] | None = None) -> None:
        """Local model folders must exist. Prebuild calls this; hydrate does not (boot hosts lack models)."""
        wanted = self._check_filter("model", models, self.model_names())
        for m in self.models:
            path = m.model.path
            if path is None or (wanted is not None and m.model.name not in wanted):
                continue
            if not Path(path).is_dir():
                what = "is not a directory" if Path(path).exists() else "does not exist"
                raise ConfigError(f"{self.source}:{m.path_line}: model {m.model.name!r} path {path} {what}",
                                  path=path)

    def _check_filter(self, kind: str, wanted: Collection[str] | None, known: Sequence[str]) -> frozenset[str] | None:
        """The filter as a set (None: everything); a bare string is one name, not its characters."""
        if wanted is None:
            return None
        names = frozenset([wanted] if isinstance(wanted, str) else wanted)
        unknown = sorted(names - set(known))
        if unknown:
            raise ConfigError(f"{self.source}: unknown {kind} {', '.join(map(repr, unknown))} "
                              f"(the config has: {', '.join(known)})", path=self.source)
        return names
