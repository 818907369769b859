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
The build's private tier-2 cache (TORCH_TPU_TIER2_COMPILATION_CACHE, set by the parent) is removed when it
ends: by this process, or for tensor parallel by launch.py once every rank has exited.
"""

import os
import sys

from ..build_main import device_main, warn
from .backend import TPUBackend
from .launch import chip_lock
from .probes import remove_private_tier2


def main(argv: list[str]) -> int:
    if "WORLD_SIZE" in os.environ:
        return device_main(TPUBackend(), argv)   # a rank: launch.py cleans up after all of them
    try:
        if "TPU_VISIBLE_CHIPS" not in os.environ:
            return device_main(TPUBackend(), argv)
        with chip_lock(exclusive=False):
            return device_main(TPUBackend(), argv)
    finally:
        if problem := remove_private_tier2(os.environ):
            warn(problem)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
