"""The YAML build matrix: parsing and validation with line-precise messages.

CONTRACT (implemented by the config work; other modules rely on these names):
    load_config(path) -> Config           raises ConfigError("FILE:LINE: message") on any bad input
    parse_config(text, source) -> Config
    Config.entries(backends=None, models=None) -> list[PlannedEntry]   (the expanded matrix, pure)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .backends.base import ModelRef
from .spec import EntrySpec, Shape


@dataclass(frozen=True)
class ModelMatrix:
    """One model and the matrix it is built for (top-level defaults merged with per-model overrides)."""

    model: ModelRef
    backends: tuple[str, ...]
    modes: tuple[str, ...]
    dtypes: tuple[str, ...]
    shapes: tuple[Shape, ...]


@dataclass(frozen=True)
class PlannedEntry:
    spec: EntrySpec
    model: ModelRef


@dataclass(frozen=True)
class Config:
    source: str                                   # file path (for messages)
    models: tuple[ModelMatrix, ...]
    backend_options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    store: str | None = None
    catalog: str | None = None
    build_timeout: float = 1800.0

    def entries(self, backends: set[str] | None = None, models: set[str] | None = None) -> list[PlannedEntry]:
        raise NotImplementedError  # config work fills this in

    def options_for(self, backend: str) -> dict[str, str]:
        return dict(self.backend_options.get(backend, {}))


def parse_config(text: str, source: str = "<config>") -> Config:
    raise NotImplementedError


def load_config(path: str | Path) -> Config:
    raise NotImplementedError
