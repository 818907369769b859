"""Toolchain fingerprints: everything about the compiling host that changes compiled bytes.

A fingerprint is a flat mapping of named fields (strings) per backend. Its id is a digest of the
canonical form, so two hosts with equal fields share artifacts and any differing field separates them.
Backends compute fields with light probes only (`importlib.metadata`, env, /proc, a compiler's `-v`);
the hydrate path must never import torch to compute one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import canonical

FINGERPRINT_VERSION = 1


@dataclass(frozen=True)
class Fingerprint:
    backend: str
    fields: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, backend: str, fields: Mapping[str, object]) -> Fingerprint:
        return cls(backend, tuple(sorted((k, str(v)) for k, v in fields.items())))

    @property
    def id(self) -> str:
        """16 hex chars; the directory name in the bucket and in hydrated cache roots."""
        return canonical.digest(self.to_dict())[:16]

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "fields": dict(self.fields), "v": FINGERPRINT_VERSION}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Fingerprint:
        return cls.of(d["backend"], d["fields"])

    def get(self, name: str, default: str = "") -> str:
        return dict(self.fields).get(name, default)

    def diff(self, other: Fingerprint) -> dict[str, tuple[str, str]]:
        """Fields that differ, as name -> (self, other); for messages that say *why* it is a miss."""
        a, b = dict(self.fields), dict(other.fields)
        return {k: (a.get(k, "∅"), b.get(k, "∅")) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)}
