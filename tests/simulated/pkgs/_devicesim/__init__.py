"""SIMULATION ONLY -- shared machinery of the simulated device packages in tests/simulated/pkgs.

Not part of cachekeeper and not a model of the real runtimes' internals: it reproduces only what
cachekeeper depends on at the cache boundary, so tests can run on a CPU-only host:

  * a compile is a digest of the FX graph (or the eager op) and its input shapes/dtypes plus the flags the
    real key covers; the artifact's *content* names the compiler that made it, its *path* (the key) does
    not, exactly where the real runtimes leave gaps;
  * a present, non-empty artifact at the key's path is loaded instead of compiled (even one that another
    compiler version wrote: counted as `loaded_foreign`, which the real runtimes do not tell you);
  * writes are temp file + rename, like the real ones; per-key locks where the real one has them;
  * counters: distinct artifacts compiled vs loaded in this process (`SIMULATION.stats()`).

CPU torch has no "neuron" or "tpu" device, so tensors stay on "cpu" (`SIMULATION.device`) and eager
op-by-op compilation is observed with a TorchDispatchMode the build enters through `SIMULATION.eager_mode()`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

MAGIC = b"CACHEKEEPER-SIMULATED-ARTIFACT\n"


def digest(text: str, size: int) -> str:
    return hashlib.blake2b(text.encode(), digest_size=size).hexdigest()


def artifact(compiler: str, key: str, what: str) -> bytes:
    """Fake executable bytes: a header naming the compiler that 'built' it, then filler."""
    header = json.dumps({"simulated": True, "compiler": compiler, "key": key, "what": what[:120]})
    return MAGIC + header.encode() + b"\n" + hashlib.sha256(key.encode()).digest() * 32


def artifact_compiler(path: Path) -> str | None:
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return None
    if not head.startswith(MAGIC):
        return None
    line = head[len(MAGIC):].split(b"\n", 1)[0]
    try:
        return str(json.loads(line)["compiler"])
    except (ValueError, KeyError):
        return None


def value_signature(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"T{tuple(value.shape)}:{value.dtype}"
    if isinstance(value, torch.Generator):
        return "Generator"  # its state feeds the op at run time; its repr (an address) is not part of a key
    return repr(value)[:80]


def args_signature(args: Any, kwargs: Any) -> str:
    leaves, _ = tree_flatten((args, kwargs))
    return ",".join(value_signature(v) for v in leaves)


def graph_signature(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> str:
    """The graph's generated code (deterministic across processes) and its input shapes/dtypes."""
    return gm.code + "\n" + ",".join(value_signature(v) for v in example_inputs)


@contextlib.contextmanager
def flock(path: Path | None) -> Iterator[None]:
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class ArtifactCache:
    """Compile-or-load over one on-disk layout, with per-process counters."""

    def __init__(self, compiler: Callable[[], str]) -> None:
        self.compiler = compiler
        self.counts = {"compiled": 0, "loaded": 0, "loaded_foreign": 0}
        self._seen: set[str] = set()  # in-process cache: each distinct key is fetched once

    def stats(self) -> dict[str, int]:
        return dict(self.counts)

    def compile_only(self, key: str) -> None:
        """A compile whose result is not persisted (cache disabled)."""
        if key not in self._seen:
            self._seen.add(key)
            self.counts["compiled"] += 1

    def get_or_compile(self, key: str, path: Path, what: str, *, lock: Path | None,
                       temp_for: Callable[[Path], Path]) -> None:
        if key in self._seen:
            return
        self._seen.add(key)
        if self._load(path):
            return
        with flock(lock):
            if self._load(path):
                return
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = temp_for(path)
            tmp.write_bytes(artifact(self.compiler(), key, what))
            os.replace(tmp, path)
            self.counts["compiled"] += 1

    def _load(self, path: Path) -> bool:
        try:
            if path.stat().st_size == 0:
                return False  # the real runtimes treat an empty file as a miss
        except OSError:
            return False
        self.counts["loaded"] += 1
        if artifact_compiler(path) != self.compiler():
            self.counts["loaded_foreign"] += 1
        return True


class OpRecorder(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Calls `on_op(name, signature)` for every computing (non-view) aten op, then runs it on CPU."""

    def __init__(self, on_op: Callable[[str, str], None], on_exit: Callable[[], None] | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.on_op = on_op
        self.on_exit = on_exit

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if not func.is_view:
            self.on_op(str(func), args_signature(args, kwargs))
        return func(*args, **kwargs)

    def __exit__(self, *exc: Any) -> Any:
        if self.on_exit is not None:
            self.on_exit()
        return super().__exit__(*exc)  # type: ignore[no-untyped-call]


def register_gloo_process_group(name: str) -> None:
    """A process-group backend called `name` that is really gloo (CPU tensors, torchrun rendezvous)."""
    import torch.distributed as dist

    def create(store: Any, rank: int, size: int, timeout: Any) -> Any:
        return dist.ProcessGroupGloo(store, rank, size, timeout)

    register_process_group(name, create)


def register_process_group(name: str, create: Callable[[Any, int, int, Any], Any]) -> None:
    import torch.distributed as dist

    if name in dist.Backend.backend_list:
        return
    dist.Backend.register_backend(name, create, devices=["cpu"])


def make_cpu_an_accelerator_for_diffusers(device_count: int = 8) -> None:
    """diffusers' tensor parallel accepts only accelerator meshes and divides by the device count; on a
    real Trainium/TPU host both hold. Here: report `device_count` devices and allow a "cpu" mesh."""
    torch.accelerator.device_count = lambda: device_count
    try:
        from diffusers.hooks import tensor_parallel
    except ImportError:
        return
    supported: tuple[str, ...] = tensor_parallel._SUPPORTED_TP_DEVICES
    if "cpu" not in supported:
        tensor_parallel._SUPPORTED_TP_DEVICES = (*supported, "cpu")  # type: ignore[assignment]
