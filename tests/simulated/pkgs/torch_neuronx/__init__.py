"""SIMULATION of torch-neuronx (TorchNeuron, the native Trainium backend), for cachekeeper's tests.

Not the real package: nothing runs on a NeuronCore. It behaves like the real one at the cache boundary.
Where each behaviour was read: "0.1.0" is the native source at version 0.1.0 (public repository
parmoham-aws/test-repo-parmoham, DESIGN.md §1, SOURCES.md Part 1), by file:
  * dynamo backend "neuron": a graph compiles to one NEFF at
    $TORCH_NEURONX_NEFF_CACHE_DIR/<k0k1>/<k2k3>/<32 hex key>.neff (default /tmp/neff_cache)
    (0.1.0 csrc/core/cache/PersistentCacheBackend.cpp, GetShardedPath);
  * eager mode: each computing op compiles to its own NEFF in the same layout (-O1 instead of -O2);
    with NEURON_LAUNCH_BLOCKING=1 (sync eager) ops go the Python path instead: <64 hex>/<64 hex>.neff, a
    sha256 key that includes the neuronx-cc version, `tmp*.tmp` temps (0.1.0 kernels/compiler_subprocess.py,
    CompilerSubprocess.get_or_compile; python_ops/torch_mlir/kernel.py, _get_or_compile_neff);
  * the key covers the graph/op and its input shapes and dtypes, the target family of the DEVICE
    (SIM_NEURON_TARGET, default trn2: 0.1.0 reads it from the runtime, csrc/core/utils/PlatformUtils.cpp,
    and never reads NEURON_PLATFORM_TARGET_OVERRIDE), NEURON_LOGICAL_NC_CONFIG (2), NEURON_COMPILER_OPT_LEVEL
    and the raw NEURON_CC_FLAGS string, spaces as `_` and `=` as `-` (0.1.0 csrc/core/KernelExecution.cpp,
    GenerateCacheKey: two spellings of the same flags are two keys) -- and, like the real key, NOT the
    neuronx-cc version, which is written into the NEFF's content only;
  * counters: `torch_neuronx.metrics.get_counter_value("CompilationCache.TotalCompilations" |
    "CompilationCache.PersistentHits")`, counting only when TORCH_NEURONX_METRICS_ENABLED is 1/true/yes at
    start-up (0.1.0 torch_neuronx/metrics.py; csrc/core/metrics/NeuronMetrics.h:262-275): else None;
  * `torch_neuronx.utils.get_platform_target()` / `get_lnc_setting()` (0.1.0 torch_neuronx/utils.py);
  * temp file (`.tmp.XXXXXX` beside the NEFF) + rename; per-key flock files in
    TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR (default /tmp/local_cache); empty files are misses;
    TORCH_NEURONX_NEFF_DISABLE_CACHE=1 compiles without reading or writing the cache;
  * process-group backend "neuron" (gloo underneath), so torchrun + init_process_group work.

The one deliberate difference: tensors stay on "cpu" (`SIMULATION.device`), and eager compilation is
observed only inside `SIMULATION.eager_mode()` (cachekeeper/backends/build_main.py: device_runtime).
"""

from __future__ import annotations

import importlib.metadata
import os
import tempfile
from pathlib import Path
from typing import Any

import _devicesim
import neuronxcc
import torch

try:
    __version__ = importlib.metadata.version("torch-neuronx")
except importlib.metadata.PackageNotFoundError:
    __version__ = "0+simulated"

DEFAULT_CACHE_DIR = "/tmp/neff_cache"
DEFAULT_LOCAL_CACHE_DIR = "/tmp/local_cache"


def _env(name: str, default: str = "") -> str:
    return os.environ.get(name) or default


def _target() -> str:
    """The device's family: the runtime asks the device (nrt_get_instance_info), never an env override."""
    return _env("SIM_NEURON_TARGET", "trn2")


def _lnc() -> str:
    return _env("NEURON_LOGICAL_NC_CONFIG", "2")


def _args() -> str:
    """The compiler args as the key spells them: fixed flags + " " + NEURON_CC_FLAGS verbatim, spaces as
    `_` and `=` as `-` (so "--a=1  -O1" and "--a=1 -O1" are two keys)."""
    return ("--model-type transformer --auto-cast=none " + _env("NEURON_CC_FLAGS")).replace(" ", "_").replace("=", "-")


def neff_key(kind: str, signature: str) -> str:
    """32 hex chars over the IR and the compile options; the compiler version is deliberately absent."""
    opt_level = _env("NEURON_COMPILER_OPT_LEVEL", "1" if kind == "op" else "2")
    options = "|".join([kind, _target(), _lnc(), opt_level, _args()])
    return str(_devicesim.digest(signature + "\0" + options, 16))


def python_path_key(signature: str) -> str:
    """The Python path's sha256 key: it does include the neuronx-cc version."""
    import hashlib

    options = "|".join([_target(), "transformer", _env("NEURON_COMPILER_OPT_LEVEL", "1"), _lnc(),
                        neuronxcc.__version__, " ".join(sorted(_env("NEURON_CC_FLAGS").split()))])
    return hashlib.sha256(f"{hashlib.sha256(signature.encode()).hexdigest()}:{options}".encode()).hexdigest()


def _compiler() -> str:
    return f"neuronx-cc {neuronxcc.__version__}"


_CACHE = _devicesim.ArtifactCache(_compiler)


def _temp_beside(path: Path) -> Path:
    fd, name = tempfile.mkstemp(prefix=".tmp.", dir=path.parent)
    os.close(fd)
    return Path(name)


def _python_temp(path: Path) -> Path:
    fd, name = tempfile.mkstemp(prefix="tmp", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(name)


def compile_or_load(kind: str, signature: str, what: str) -> None:
    root = Path(_env("TORCH_NEURONX_NEFF_CACHE_DIR", DEFAULT_CACHE_DIR))
    locks = Path(_env("TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR", DEFAULT_LOCAL_CACHE_DIR))
    if kind == "op" and _env("NEURON_LAUNCH_BLOCKING") == "1":
        key = python_path_key(signature)
        _CACHE.get_or_compile(key, root / key / f"{key}.neff", what, lock=locks / key / "locks" / "compile.lock",
                              temp_for=_python_temp)
        return
    key = neff_key(kind, signature)
    if _env("TORCH_NEURONX_NEFF_DISABLE_CACHE") == "1":   # the C++ cache honours exactly "1"
        _CACHE.compile_only(key)
        return
    _CACHE.get_or_compile(key, root / key[:2] / key[2:4] / f"{key}.neff", what,
                          lock=locks / f"{key}.lock", temp_for=_temp_beside)


@torch._dynamo.register_backend(name="neuron")
def neuron_backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
    compile_or_load("graph", _devicesim.graph_signature(gm, example_inputs), "graph")
    return gm.forward  # "execute the NEFF": run the graph on CPU


class _Simulation:
    device = "cpu"

    @staticmethod
    def eager_mode() -> _devicesim.OpRecorder:
        return _devicesim.OpRecorder(lambda op, sig: compile_or_load("op", op + "(" + sig + ")", op))

    @staticmethod
    def stats() -> dict[str, int]:
        return dict(_CACHE.stats())


SIMULATION = _Simulation()
METRICS_ENABLED = _env("TORCH_NEURONX_METRICS_ENABLED").lower() in ("1", "true", "yes")   # read at start-up
from torch_neuronx import metrics, utils  # noqa: E402,F401  (the package's submodules)

_devicesim.register_gloo_process_group("neuron")
_devicesim.make_cpu_an_accelerator_for_diffusers()
