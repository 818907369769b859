"""SIMULATION of torch-neuronx (TorchNeuron, the native Trainium backend), for cachekeeper's tests.

Not the real package: nothing runs on a NeuronCore. It behaves like the real one at the cache boundary:
  * dynamo backend "neuron": a graph compiles to one NEFF at
    $TORCH_NEURONX_NEFF_CACHE_DIR/<k0k1>/<k2k3>/<32 hex key>.neff (default /tmp/neff_cache);
  * eager mode: each computing op compiles to its own NEFF in the same layout (-O1 instead of -O2);
  * the key covers the graph/op and its input shapes and dtypes, the target family
    (NEURON_PLATFORM_TARGET_OVERRIDE, else SIM_NEURON_TARGET, else trn2), NEURON_LOGICAL_NC_CONFIG (2),
    NEURON_COMPILER_OPT_LEVEL and NEURON_CC_FLAGS -- and, like the real key, NOT the neuronx-cc version,
    which is written into the NEFF's content only;
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
    return _env("NEURON_PLATFORM_TARGET_OVERRIDE") or _env("SIM_NEURON_TARGET", "trn2")


def neff_key(kind: str, signature: str) -> str:
    """32 hex chars over the IR and the compile options; the compiler version is deliberately absent."""
    opt_level = _env("NEURON_COMPILER_OPT_LEVEL", "1" if kind == "op" else "2")
    options = "|".join([kind, _target(), _env("NEURON_LOGICAL_NC_CONFIG", "2"), opt_level,
                        " ".join(_env("NEURON_CC_FLAGS").split())])
    return str(_devicesim.digest(signature + "\0" + options, 16))


def _compiler() -> str:
    return f"neuronx-cc {neuronxcc.__version__}"


_CACHE = _devicesim.ArtifactCache(_compiler)


def _temp_beside(path: Path) -> Path:
    fd, name = tempfile.mkstemp(prefix=".tmp.", dir=path.parent)
    os.close(fd)
    return Path(name)


def compile_or_load(kind: str, signature: str, what: str) -> None:
    key = neff_key(kind, signature)
    if _env("TORCH_NEURONX_NEFF_DISABLE_CACHE").lower() in ("1", "true", "yes"):
        _CACHE.compile_only(key)
        return
    root = Path(_env("TORCH_NEURONX_NEFF_CACHE_DIR", DEFAULT_CACHE_DIR))
    locks = Path(_env("TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR", DEFAULT_LOCAL_CACHE_DIR))
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
_devicesim.register_gloo_process_group("neuron")
_devicesim.make_cpu_an_accelerator_for_diffusers()
