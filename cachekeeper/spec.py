"""What one compiled artifact set is *for*: an entry of the build matrix.

An entry names the model, component, backend, compile mode, shape and dtype (plus backend options that
change the compiled graph, such as the tensor-parallel degree). Its key is the digest of its canonical
form. The toolchain that compiled it is a separate dimension (`fingerprint.py`): the full address of an
artifact set is (fingerprint id, entry key).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from . import canonical

SPEC_VERSION = 1


@dataclass(frozen=True, order=True)
class Shape:
    height: int
    width: int
    batch: int = 1

    def label(self) -> str:
        return f"{self.height}x{self.width}x{self.batch}"


@dataclass(frozen=True)
class EntrySpec:
    model: str               # the model's name in the config: its identity (bump it or `revision` on change)
    component: str           # "transformer", "unet", ...
    backend: str             # "inductor", "neuron", "tpu"
    mode: str                # "full", "repeated_blocks", "eager", "defer_and_fuse"
    shape: Shape
    dtype: str               # "float32", "bfloat16", ...
    revision: str = ""       # hub revision or a user-chosen version of a local model
    options: tuple[tuple[str, str], ...] = field(default=())  # graph-changing backend options, sorted

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["options"] = dict(self.options)
        d["v"] = SPEC_VERSION
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EntrySpec:
        return cls(
            model=d["model"], component=d["component"], backend=d["backend"], mode=d["mode"],
            shape=Shape(**d["shape"]), dtype=d["dtype"], revision=d.get("revision", ""),
            options=tuple(sorted((str(k), str(v)) for k, v in d.get("options", {}).items())),
        )

    @property
    def key(self) -> str:
        """32 hex chars: stable across processes and hosts (tested)."""
        return canonical.digest(self.to_dict())[:32]

    def label(self) -> str:
        opts = "".join(f",{k}={v}" for k, v in self.options)
        return f"{self.model}/{self.component} {self.backend}:{self.mode} {self.shape.label()} {self.dtype}{opts}"
