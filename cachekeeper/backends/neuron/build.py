"""Compile one entry with TorchNeuron into the job's NEFF cache (a subprocess the worker launches).

    python -m cachekeeper.backends.neuron.build '<BuildJob json>'
    python -m torch.distributed.run --standalone --nproc_per_node=N -m cachekeeper.backends.neuron.build ...

Follows the documented APIs: eager `model.to("neuron")` (ops compile as they first run);
`model.compile(backend="neuron", fullgraph=True, dynamic=False)`; `compile_repeated_blocks(...)` with the
same arguments; tensor parallel through `init_process_group(backend="neuron")`, a `DeviceMesh("neuron")`
and diffusers' `TensorParallelConfig`. One warm-up call at the entry's shape, then a JSON result with the
runtime's compiled/loaded counters (or, without counters, the NEFFs this run added).

The parent sets TORCH_NEURONX_NEFF_CACHE_DIR, TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR and
TORCH_DEVICE_BACKEND_AUTOLOAD=0, so torch_neuronx is imported here, explicitly.
"""

from __future__ import annotations

import sys
from functools import partial
from typing import Any

from .._common import build_main, device_runtime, import_device_package, run_build
from ..base import CACHE_ROOT, BuildJob
from .backend import INSTALL_HINT, NeuronBackend

EAGER_MODES = ("eager",)


def build(job: BuildJob) -> dict[str, Any]:
    import torch  # noqa: F401  (before the device package, as autoload would)

    torch_neuronx = import_device_package("torch_neuronx", "neuron", INSTALL_HINT)
    rt = device_runtime(torch_neuronx, device="neuron", compile_backend="neuron", dist_backend="neuron")
    backend = NeuronBackend()
    return run_build(job, rt, eager_modes=EAGER_MODES, is_artifact=partial(backend.include, CACHE_ROOT))


if __name__ == "__main__":
    sys.exit(build_main(sys.argv[1:], "cachekeeper.backends.neuron.build", build))
