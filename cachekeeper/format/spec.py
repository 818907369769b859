"""What one compiled artifact set is *for*: an entry of the build matrix.

An entry names the model, component, backend, compile mode, shape and dtype (plus backend options that
change the compiled graph, such as the tensor-parallel degree). Its key is the digest of its canonical
form. The toolchain that compiled it is a separate dimension (`fingerprint.py`): the full address of an
artifact set is (fingerprint id, entry key). `ModelRef` says where a build loads the entry's model from.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

from . import canonical

SPEC_VERSION = 1

# Modes in which every op compiles as it first runs: only a whole-pipeline warm-up leaves nothing for boot.
EAGER_MODES = frozenset({"eager", "defer_and_fuse"})
WARMUPS = ("pipeline", "component")
OFFLOADS = ("model", "sequential")
# The torch.compile `mode` an entry is built and served with (matrix key `compile_modes`). The default adds
# nothing to the key, so keys made before compile modes were a matrix option stay valid.
COMPILE_MODE = "compile_mode"
DEFAULT_COMPILE_MODE = "default"


def default_warmup(mode: str) -> str:
    """`pipeline` for eager modes (the text encoders, VAE and scheduler compile too), else `component`."""
    return "pipeline" if mode in EAGER_MODES else "component"


def warmup_options(warmup: str, *, guidance: bool, max_sequence_length: int, offload: str) -> dict[str, str]:
    """The key options of a warm-up. A component warm-up without a sequence length adds none, so keys made
    before pipeline warm-ups existed stay valid (its batch already carries guidance)."""
    out: dict[str, str] = {}
    if max_sequence_length:
        out["max_sequence_length"] = str(max_sequence_length)
    if warmup == "pipeline":
        out["warmup"] = "pipeline"
        out["guidance"] = "on" if guidance else "off"
        if offload:
            out["offload"] = offload
    return out


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
        # The fields in order, copied one level: `asdict` deep-copies recursively, 5x slower, and a 10k-entry
        # plan builds this for every key and queue payload. Values are str/int; shape is the one nested field.
        # By field name: `key`, computed once, is cached in the same __dict__ and is no part of the spec.
        d = {name: self.__dict__[name] for name in _ENTRY_FIELDS}
        d["shape"] = dict(self.shape.__dict__)
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

    @functools.cached_property
    def key(self) -> str:
        """32 hex chars: stable across processes and hosts (tested). Computed once per spec (a digest of
        the canonical spec; a 10k-entry plan asks often)."""
        return canonical.digest(self.to_dict())[:32]

    def label(self) -> str:
        opts = "".join(f",{k}={v}" for k, v in self.options)
        return f"{self.model}/{self.component} {self.backend}:{self.mode} {self.shape.label()} {self.dtype}{opts}"


_ENTRY_FIELDS = tuple(f.name for f in dataclasses.fields(EntrySpec))


@dataclass(frozen=True)
class ModelRef:
    """Where the worker loads a model from (the entry's identity is EntrySpec.model/revision)."""

    name: str
    component: str
    path: str | None = None          # local diffusers folder (save_pretrained layout)
    hub: str | None = None           # hub repo id, used with revision
    revision: str = ""
    inputs: str = "auto"             # warm-up input builder: auto|flux|unet|"module:function"
    tensor_parallel: int = 1         # >1: launched under torchrun --nproc_per_node=N
    guidance: bool = False           # classifier-free guidance: a pipeline warm-up runs batch = spec batch / 2
    warmup: str = ""                 # "pipeline" | "component"; "" = by mode (spec.default_warmup)
    max_sequence_length: int = 0     # the prompt padding length of the pipeline call; 0 = the pipeline's default
    offload: str = ""                # "model" | "sequential" CPU offload of a pipeline warm-up; "" = on the device

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)
