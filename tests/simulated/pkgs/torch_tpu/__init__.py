"""SIMULATION of torch_tpu (TorchTPU on Cloud TPU), for cachekeeper's tests. Not the real package.

It behaves like the real one at the tier-3 (persistent) compilation cache boundary:
  * enabled by TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT (else TORCH_TPU_INTERNAL_TIER3_COMPILATION_CACHE_ROOT),
    and only while tier 2 is on: TORCH_TPU_TIER2_COMPILATION_CACHE=disabled (or the INTERNAL variable when
    the public one is unset) silently turns tier 3 off -- every run compiles and nothing is written;
  * layout <root>/<16 hex platform fingerprint>/<k1>_<k2>_<k3>.bin: the platform fingerprint covers a cache
    format constant and libtpu's PjRt platform version; k1 = graph without shapes, k2 = dimensions,
    k3 = compile options (XLA_FLAGS, TORCH_TPU_INTERNAL_XLA_OPTIONS, eager mode). Not in any of them, as
    in the real key: chip generation, topology, LIBTPU_INIT_ARGS, the torch_tpu version (content only);
  * temp `<entry>.bin.<host>-<tid>-<pid>-<us>.<n>.tmp` + rename, last writer wins; no locks;
  * modes: strict eager (op by op), defer-and-fuse (TORCH_TPU_DEFER_AND_FUSE=1, else TPU_DEFER_AND_FUSE=1:
    groups of up to 8 ops compile as one program), dynamo backend "tpu";
  * process-group backend "tpu_dist" (gloo underneath).
Tier 2 (/dev/shm) itself is not simulated, so a second process really reads tier 3.
Tensors stay on "cpu" (`SIMULATION.device`); eager compiles are observed inside `SIMULATION.eager_mode()`.
"""

from __future__ import annotations

import importlib.metadata
import itertools
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import _devicesim
import libtpu
import torch

try:
    __version__ = importlib.metadata.version("torch-tpu")
except importlib.metadata.PackageNotFoundError:
    __version__ = "0+simulated"

CACHE_FORMAT = "torch_tpu binary version 3"
FUSE_GROUP = 8
_counter = itertools.count()


def _env(name: str) -> str | None:
    return os.environ.get(name)


def tier2_enabled(tier3_root: str) -> bool:
    name = _env("TORCH_TPU_TIER2_COMPILATION_CACHE")
    if name is None:
        name = _env("TORCH_TPU_INTERNAL_TIER2_COMPILATION_CACHE")
    if name == "disabled":
        return False
    return bool(name) or bool(tier3_root)  # unset: on whenever tier 3 is


def tier3_root() -> str:
    public = _env("TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT")
    return public or _env("TORCH_TPU_INTERNAL_TIER3_COMPILATION_CACHE_ROOT") or ""


def platform_fingerprint() -> str:
    return str(_devicesim.digest(CACHE_FORMAT + "\0" + libtpu.PLATFORM_VERSION, 8))


def defer_and_fuse() -> bool:
    value = _env("TORCH_TPU_DEFER_AND_FUSE")
    return (value if value is not None else _env("TPU_DEFER_AND_FUSE")) == "1"


def _compiler() -> str:
    return f"torch_tpu {__version__} libtpu {libtpu.__version__}"


_CACHE = _devicesim.ArtifactCache(_compiler)


def _temp_beside(path: Path) -> Path:
    unique = f"{socket.gethostname()}-{threading.get_ident()}-{os.getpid()}-{int(time.time() * 1e6)}"
    return path.with_name(f"{path.name}.{unique}.{next(_counter)}.tmp")


def compile_or_load(shapeless: str, dims: str, what: str) -> None:
    options = " ".join([_env("XLA_FLAGS") or "", _env("TORCH_TPU_INTERNAL_XLA_OPTIONS") or "",
                        "defer_and_fuse" if defer_and_fuse() else "strict"])
    k1, k2, k3 = (_devicesim.digest(p, 8) for p in (shapeless, dims, options))
    key = f"{k1}_{k2}_{k3}"
    root = tier3_root()
    if not root or not tier2_enabled(root):
        _CACHE.compile_only(key)
        return
    path = Path(root) / platform_fingerprint() / f"{key}.bin"
    _CACHE.get_or_compile(key, path, what, lock=None, temp_for=_temp_beside)


def _split(signature: str) -> tuple[str, str]:
    """(shapeless part, dimensions part) of a signature: shapes go to k2, everything else to k1."""
    shapeless = "".join(c if not c.isdigit() else "#" for c in signature)
    dims = "".join(c for c in signature if c.isdigit() or c == ",")
    return shapeless, dims


@torch._dynamo.register_backend(name="tpu")
def tpu_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    shapes = ",".join(_devicesim.value_signature(v) for v in example_inputs)
    compile_or_load(gm.code + _split(shapes)[0], _split(shapes)[1], "graph")
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
    device = "cpu"

    @staticmethod
    def eager_mode() -> _devicesim.OpRecorder:
        eager = _Eager()
        return _devicesim.OpRecorder(eager.op, on_exit=eager.flush)

    @staticmethod
    def stats() -> dict[str, int]:
        return dict(_CACHE.stats())


SIMULATION = _Simulation()
_devicesim.register_gloo_process_group("tpu_dist")
_devicesim.make_cpu_an_accelerator_for_diffusers()
