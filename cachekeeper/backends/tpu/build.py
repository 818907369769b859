"""Compile one entry with TorchTPU into the job's tier-3 cache root (a subprocess the worker launches).

    python -m cachekeeper.backends.tpu.build '<BuildJob json>'
    python -m cachekeeper.backends.tpu.launch --standalone --nproc_per_node=N -m cachekeeper.backends.tpu.build ...

The build is the shared one (build_main.device_build) fed with TPUBackend.toolchain: torch is imported with
TORCH_DEVICE_BACKEND_AUTOLOAD=0 (set by the parent), then torch_tpu, then its `torch.backends` entry point
`torch_tpu._loader:load`, which registers the `tpu` device and `tpu_dist` (0.2.0 skips it at import when
autoload was off). Documented APIs only: strict eager `model.to("tpu")` (ops compile as they first run);
defer-and-fuse is the same with TORCH_TPU_DEFER_AND_FUSE=1 (set by the parent); `model.compile(backend="tpu",
fullgraph=True, dynamic=False)` and `compile_repeated_blocks(...)`; tensor parallel through
`init_process_group(backend="tpu_dist")`, a `DeviceMesh("tpu")` and diffusers' `TensorParallelConfig`, the
ranks started by launch.py. A single-chip build in a build.workers slot holds the chip lock shared.
"""

import os
import sys

from ..build_main import device_main
from .backend import TPUBackend
from .launch import chip_lock

if __name__ == "__main__":
    if "WORLD_SIZE" in os.environ or "TPU_VISIBLE_CHIPS" not in os.environ:
        sys.exit(device_main(TPUBackend(), sys.argv[1:]))
    with chip_lock(exclusive=False):
        sys.exit(device_main(TPUBackend(), sys.argv[1:]))
