"""Compile one entry with TorchNeuron into the job's NEFF cache (a subprocess the worker launches).

    python -m cachekeeper.backends.neuron.build '<BuildJob json>'
    python -m torch.distributed.run --standalone --nproc_per_node=N -m cachekeeper.backends.neuron.build ...

The build is the shared one (build_main.device_build) fed with NeuronBackend.toolchain. It follows the
documented APIs: eager `model.to("neuron")` (ops compile as they first run);
`model.compile(backend="neuron", fullgraph=True, dynamic=False)`; `compile_repeated_blocks(...)` with the
same arguments; tensor parallel through `init_process_group(backend="neuron")`, a `DeviceMesh("neuron")`
and diffusers' `TensorParallelConfig`. One warm-up call at the entry's shape, then a JSON result with the
runtime's compiled/loaded counters (or, without counters, the NEFFs this run added).

The parent sets TORCH_NEURONX_NEFF_CACHE_DIR, TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR and
TORCH_DEVICE_BACKEND_AUTOLOAD=0, so torch_neuronx is imported there, explicitly.
"""

import sys

from ..build_main import device_main
from .backend import NeuronBackend

if __name__ == "__main__":
    sys.exit(device_main(NeuronBackend(), sys.argv[1:]))
