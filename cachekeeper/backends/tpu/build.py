"""Compile one entry with TorchTPU into the job's tier-3 cache root (a subprocess the worker launches).

    python -m cachekeeper.backends.tpu.build '<BuildJob json>'
    python -m torch.distributed.run --standalone --nproc_per_node=N -m cachekeeper.backends.tpu.build ...

Documented APIs only: strict eager `model.to("tpu")` (ops compile as they first run); defer-and-fuse is the
same with TORCH_TPU_DEFER_AND_FUSE=1 (set by the parent); `model.compile(backend="tpu", fullgraph=True,
dynamic=False)` and `compile_repeated_blocks(...)`; tensor parallel through
`init_process_group(backend="tpu_dist")`, a `DeviceMesh("tpu")` and diffusers' `TensorParallelConfig`.
The parent sets TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT and TORCH_DEVICE_BACKEND_AUTOLOAD=0.
"""

from __future__ import annotations

import sys
from functools import partial
from typing import Any

from .._common import build_main, device_runtime, import_device_package, run_build
from ..base import CACHE_ROOT, BuildJob
from .backend import INSTALL_HINT, TPUBackend

EAGER_MODES = ("eager", "defer_and_fuse")


def build(job: BuildJob) -> dict[str, Any]:
    import torch  # noqa: F401  (before the device package, as autoload would)

    torch_tpu = import_device_package("torch_tpu", "tpu", INSTALL_HINT)
    rt = device_runtime(torch_tpu, device="tpu", compile_backend="tpu", dist_backend="tpu_dist")
    backend = TPUBackend()
    return run_build(job, rt, eager_modes=EAGER_MODES, is_artifact=partial(backend.include, CACHE_ROOT))


if __name__ == "__main__":
    sys.exit(build_main(sys.argv[1:], "cachekeeper.backends.tpu.build", build))
