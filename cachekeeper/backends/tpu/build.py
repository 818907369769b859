"""Compile one entry with TorchTPU into the job's tier-3 cache root (a subprocess the worker launches).

    python -m cachekeeper.backends.tpu.build '<BuildJob json>'
    python -m torch.distributed.run --standalone --nproc_per_node=N -m cachekeeper.backends.tpu.build ...

The build is the shared one (build_main.device_build) fed with TPUBackend.toolchain. Documented APIs only:
strict eager `model.to("tpu")` (ops compile as they first run); defer-and-fuse is the same with
TORCH_TPU_DEFER_AND_FUSE=1 (set by the parent); `model.compile(backend="tpu", fullgraph=True,
dynamic=False)` and `compile_repeated_blocks(...)`; tensor parallel through
`init_process_group(backend="tpu_dist")`, a `DeviceMesh("tpu")` and diffusers' `TensorParallelConfig`.
The parent sets TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT and TORCH_DEVICE_BACKEND_AUTOLOAD=0.
"""

import sys

from ..build_main import device_main
from .backend import TPUBackend

if __name__ == "__main__":
    sys.exit(device_main(TPUBackend(), sys.argv[1:]))
