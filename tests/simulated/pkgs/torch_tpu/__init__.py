"""SIMULATION of torch_tpu (TorchTPU on Cloud TPU), for cachekeeper's tests. Not the real package.

It behaves like the released torch-tpu 0.2.0 at the boundaries cachekeeper depends on. Where each
behaviour was read ("py": the package's Python files; "glue": strings of
csrc/common/glue_2_13_0/libpywrap_2_13_0_common.so; "not visible": only a TPU would show it):
  * loader (py, _loader.py): see `_loader`; without `load()` there is no `tpu` device, only the dynamo
    backend "tpu", which registers at import. Here the missing device shows as `SIMULATION.device == "tpu"`,
    which CPU torch rejects, as real torch does before `load()`;
  * tiers (glue): tier 3 is on when tier 2 is on and TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT is non-empty.
    TORCH_TPU_TIER2_COMPILATION_CACHE exactly `disabled` turns tier 2 off (one INFO line); any other
    non-empty value is the tier-2 cache's name; unset or empty: on when tier 3 is configured, else only for
    WORLD_SIZE > 1. No TORCH_TPU_INTERNAL_* tier variables exist. Tier 2 itself (/dev/shm) is not
    simulated, so a second process really reads tier 3;
  * layout (glue): <root>/<16 hex platform fingerprint>/<name>.bin, name `%016x_%016x_%016x` (shapeless
    graph key, dimensions key, compile-options key) or `%016x_%016x_%016x_%s` when the key's id_key is
    non-empty. What sets id_key is not visible: here torch.compile graphs carry one ("g"), eager ops none;
  * one CompilationCache (glue, GetOrCompile): eager (DEFER_NEVER), defer-and-fuse and torch.compile graphs
    share one tier-3 dir and differ by graph key only; the eager mode is not in the compile-options key;
  * compile-options key (glue): XLA_FLAGS, LIBTPU_INIT_ARGS, TORCH_TPU_INTERNAL_XLA_OPTIONS and the device
    assignment (DeviceAssignment::ToString). How libtpu numbers a process's devices is not visible: here a
    single-process slice (TPU_PROCESS_BOUNDS=1,1,1, or no TPU_VISIBLE_CHIPS) numbers its chips from 0,
    a process that sees other chips without being its own slice addresses them by their host index, and
    a rank of WORLD_SIZE > 1 addresses the whole group (0..WORLD_SIZE-1);
  * platform fingerprint (glue): binary-version constant 5 with the platform version and "C API version:";
  * temps (DESIGN.md, 0.2.0 reading): `<entry>.bin.<host>-<tid hex>-<pid>-<µs hex>.<n>.tmp` + rename; no locks;
  * modes (glue): strict eager (DEFER_NEVER, default); TORCH_TPU_DEFER_AND_FUSE read as a boolean
    ("1"/"true"): groups of up to 8 ops compile as one program; dynamo backend "tpu";
  * distributed (py + glue): `_internal.distributed`; counters: `_internal.device._device_ops_backend`.
Tensors stay on "cpu" (`SIMULATION.device` once loaded); eager compiles are observed inside
`SIMULATION.eager_mode()`.
"""

from __future__ import annotations

import itertools
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import _devicesim
import libtpu
import torch

from torch_tpu import _loader

BINARY_VERSION = 5
C_API_VERSION = "0.80"
FUSE_GROUP = 8
GRAPH_ID_KEY = "g"
_counter = itertools.count()


def _env(name: str) -> str:
    return os.environ.get(name) or ""


def tier2_name(tier3: str) -> str | None:
    """The tier-2 cache's name, None when tier 2 is off."""
    value = _env("TORCH_TPU_TIER2_COMPILATION_CACHE")
    if value == "disabled":
        print("I tier2: Tier-2 compilation cache is disabled as requested by the environment", file=sys.stderr)
        return None
    if value:
        return value
    if tier3 or int(_env("WORLD_SIZE") or "1") > 1:
        return "default"
    return None


def tier3_root() -> str:
    root = _env("TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT")
    return root if root and tier2_name(root) is not None else ""


def platform_fingerprint() -> str:
    text = f"{libtpu.PLATFORM_VERSION}\nC API version: {C_API_VERSION}"
    return str(_devicesim.digest(f"{BINARY_VERSION}\0{text}", 8))


def defer_and_fuse() -> bool:
    return _env("TORCH_TPU_DEFER_AND_FUSE").lower() in ("1", "true")


def device_assignment() -> str:
    """DeviceAssignment::ToString of a program on this process's devices (see the module docstring)."""
    size = int(_env("WORLD_SIZE") or "1")
    if size > 1:
        return "devices=" + ",".join(map(str, range(size)))
    visible = _env("TPU_VISIBLE_CHIPS")
    if not visible or _env("TPU_PROCESS_BOUNDS") == "1,1,1":
        return "devices=0"
    return f"devices={visible.split(',')[0]}"


def _compiler() -> str:
    return f"torch_tpu {_version('torch-tpu')} libtpu {libtpu.__version__}"


def _version(dist: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "0+simulated"


_CACHE = _devicesim.ArtifactCache(_compiler)


def _temp_beside(path: Path) -> Path:
    unique = f"{socket.gethostname()}-{threading.get_ident():x}-{os.getpid()}-{int(time.time() * 1e6):x}"
    return path.with_name(f"{path.name}.{unique}.{next(_counter)}.tmp")


def compile_or_load(shapeless: str, dims: str, what: str, id_key: str = "") -> None:
    options = "\n".join([_env("XLA_FLAGS"), _env("LIBTPU_INIT_ARGS"), _env("TORCH_TPU_INTERNAL_XLA_OPTIONS"),
                         device_assignment()])
    k1, k2, k3 = (_devicesim.digest(p, 8) for p in (shapeless, dims, options))
    name = f"{k1}_{k2}_{k3}" + (f"_{id_key}" if id_key else "")
    root = tier3_root()
    if not root:
        _CACHE.compile_only(name)
        return
    path = Path(root) / platform_fingerprint() / f"{name}.bin"
    _CACHE.get_or_compile(name, path, what, lock=None, temp_for=_temp_beside)


def _split(signature: str) -> tuple[str, str]:
    """(shapeless part, dimensions part) of a signature: shapes go to k2, everything else to k1."""
    shapeless = "".join(c if not c.isdigit() else "#" for c in signature)
    dims = "".join(c for c in signature if c.isdigit() or c == ",")
    return shapeless, dims


@torch._dynamo.register_backend(name="tpu")
def tpu_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    shapes = ",".join(_devicesim.value_signature(v) for v in example_inputs)
    shapeless, dims = _split(shapes)
    compile_or_load(gm.code + shapeless, dims, "graph", id_key=GRAPH_ID_KEY)
    return gm.forward


class _Eager:
    """Strict eager compiles each op; defer-and-fuse compiles groups of ops as one program."""

    def __init__(self) -> None:
        self.pending: list[str] = []

    def op(self, name: str, signature: str) -> None:
        if not defer_and_fuse():
            shapeless, dims = _split(signature)
            compile_or_load(name + shapeless, dims, name)
            return
        self.pending.append(name + "(" + signature + ")")
        if len(self.pending) >= FUSE_GROUP:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            shapeless, dims = _split(";".join(self.pending))
            compile_or_load("fused:" + shapeless, dims, f"fused {len(self.pending)} ops")
            self.pending = []


class _Simulation:
    @property
    def device(self) -> str:
        return "cpu" if _loader._LOADED else "tpu"

    @staticmethod
    def eager_mode() -> _devicesim.OpRecorder:
        eager = _Eager()
        return _devicesim.OpRecorder(eager.op, on_exit=eager.flush)

    @staticmethod
    def stats() -> dict[str, int]:
        return dict(_CACHE.stats())


SIMULATION = _Simulation()
