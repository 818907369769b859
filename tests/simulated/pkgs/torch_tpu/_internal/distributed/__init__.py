"""SIMULATION of TorchTPU's distributed worker configuration (0.2.0, glue library strings): a process group
of WORLD_SIZE > 1 needs RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT and TORCH_TPU_SLICEBUILDER_ADDRESSES (one
address per rank), the last set only by the package's launch helpers (distributed.py here). With WORLD_SIZE
set the runtime overwrites TPU_VISIBLE_CHIPS and the other single-process variables: rank r runs on chip r."""

from __future__ import annotations

import os
from typing import Any

REQUIRED = ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "TORCH_TPU_SLICEBUILDER_ADDRESSES")
OVERWRITTEN = ("TPU_VISIBLE_CHIPS", "TPU_PROCESS_BOUNDS", "TPU_CHIPS_PER_PROCESS_BOUNDS", "TPU_PROCESS_PORT",
               "TPU_PROCESS_ADDRESSES", "CLOUD_TPU_TASK_ID", "TPU_VISIBLE_DEVICES", "TPU_HOST_BOUNDS")


def configure_worker() -> None:
    """What the runtime does with the distributed env before a multi-process TPU program starts."""
    missing = [v for v in REQUIRED if not os.environ.get(v)]
    if missing:
        raise RuntimeError(f"TPU distributed worker configuration: {', '.join(missing)} unset "
                           "(set them with torch.tpu.distributed.set_tpu_launch_env)")
    size = int(os.environ["WORLD_SIZE"])
    addresses = os.environ["TORCH_TPU_SLICEBUILDER_ADDRESSES"].split(",")
    if len(addresses) != size:
        raise RuntimeError(f"TORCH_TPU_SLICEBUILDER_ADDRESSES has {len(addresses)} addresses for WORLD_SIZE {size}")
    local = os.environ["LOCAL_RANK"]
    for var in OVERWRITTEN:
        os.environ.pop(var, None)
    os.environ["TPU_VISIBLE_CHIPS"] = local


def create_process_group(store: Any, rank: int, size: int, timeout: Any) -> Any:
    import torch.distributed as dist

    if size > 1:
        configure_worker()
    return dist.ProcessGroupGloo(store, rank, size, timeout)
