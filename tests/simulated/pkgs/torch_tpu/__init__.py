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
    WORLD_SIZE > 1. No TORCH_TPU_INTERNAL_* tier variables exist;
  * lookup order ([dev] = Google's TorchTPU tree at 0.1.1, public repository jonathan1920/torch_tpu,
    torch_tpu/csrc/common/compilation_cache.cc: GetOrCompile -> GetFromTier2OrCompile ->
    GetFromTier3OrCompile): tier 1 (this process's memory), then tier 2
    (/dev/shm/torch_tpu_cache/<name>/<platform fp>/<key>.bin, shared by every process of the host, never
    evicted; here under SIM_TPU_SHM), then tier 3, then a compile. **A tier-2 hit never writes tier 3**
    (GetFromTier2OrCompile returns after SetExecutable); a tier-3 hit fills tier 2; only a local compile
    writes tier 3 (`if (tier == CacheTier::kTier1 && uses_tier3)`);
  * counters ([dev] compilation_cache.cc, GetStaticCacheEntry; 0.2.0 glue strings `_get_cache_stats`,
    `per_entry_stats`, `compilation_duration`): `_get_cache_hits()` counts tier-1 hits only and
    `_get_cache_misses()` is requests minus hits, so every first use in a process is a "miss";
    `_get_cache_stats().per_entry_stats[i].compilation_duration` is a positive timedelta only for an
    executable this process compiled, zero when tier 2 or 3 served it;
  * eager keys hold Python scalar values ([dev] cache_key.h: an `at::Scalar` op parameter is in the key
    unless promoted): an op's non-tensor arguments are part of its key, so a scheduler step computed
    from another step count is another program;
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

import datetime
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


def _temp_beside(path: Path) -> Path:
    unique = f"{socket.gethostname()}-{threading.get_ident():x}-{os.getpid()}-{int(time.time() * 1e6):x}"
    return path.with_name(f"{path.name}.{unique}.{next(_counter)}.tmp")


def tier2_base() -> Path:
    return Path(_env("SIM_TPU_SHM") or "/dev/shm/torch_tpu_cache")


class _EntryStats:
    def __init__(self, compilation_duration: datetime.timedelta) -> None:
        self.compilation_duration = compilation_duration
        self.last_read = datetime.datetime.now()
        self.read_count = 1


class _PerfStats:
    def __init__(self, reqs: int, hits: int, entries: list[_EntryStats]) -> None:
        self.num_cache_reqs, self.num_cache_hits = reqs, hits
        self.peak_compilation_host_memory_bytes = 0
        self.per_entry_stats = list(entries)


class _CompilationCache:
    """Tier 1 (memory), tier 2 (/dev/shm, per name), tier 3 (the root), then a compile."""

    def __init__(self) -> None:
        self.entries: dict[str, _EntryStats] = {}
        self.requests = self.tier1_hits = 0
        self.counts = {"compiled": 0, "loaded": 0, "loaded_foreign": 0, "tier2_loaded": 0}

    def _read(self, path: Path | None) -> bool:
        try:
            return path is not None and path.stat().st_size > 0
        except OSError:
            return False

    def _write(self, path: Path, name: str, what: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _temp_beside(path)
        tmp.write_bytes(_devicesim.artifact(_compiler(), name, what))
        os.replace(tmp, path)

    def _loaded(self, name: str, path: Path) -> None:
        self.entries[name] = _EntryStats(datetime.timedelta(0))
        self.counts["loaded"] += 1
        if _devicesim.artifact_compiler(path) != _compiler():
            self.counts["loaded_foreign"] += 1

    def get_or_compile(self, name: str, what: str) -> None:
        self.requests += 1
        if name in self.entries:
            self.tier1_hits += 1
            return
        root = tier3_root()
        t2name = tier2_name(root)
        platform = platform_fingerprint()
        t2 = tier2_base() / t2name / platform / f"{name}.bin" if t2name else None
        t3 = Path(root) / platform / f"{name}.bin" if root else None
        if t2 is not None and self._read(t2):
            self._loaded(name, t2)            # served from tier 2: nothing is written to tier 3
            self.counts["tier2_loaded"] += 1
            return
        if t3 is not None and self._read(t3):
            self._loaded(name, t3)
            if t2 is not None:
                self._write(t2, name, what)
            return
        self.entries[name] = _EntryStats(datetime.timedelta(microseconds=1000))
        self.counts["compiled"] += 1
        for path in (t2, t3):
            if path is not None:
                self._write(path, name, what)

    def stats(self) -> dict[str, int]:
        return dict(self.counts)


_CACHE = _CompilationCache()


def compile_or_load(shapeless: str, dims: str, what: str, id_key: str = "") -> None:
    options = "\n".join([_env("XLA_FLAGS"), _env("LIBTPU_INIT_ARGS"), _env("TORCH_TPU_INTERNAL_XLA_OPTIONS"),
                         device_assignment()])
    k1, k2, k3 = (_devicesim.digest(p, 8) for p in (shapeless, dims, options))
    name = f"{k1}_{k2}_{k3}" + (f"_{id_key}" if id_key else "")
    _CACHE.get_or_compile(name, what)


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
