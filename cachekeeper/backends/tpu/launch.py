"""Start a TPU build with its chips claimed the way torch-tpu 0.2.0 needs (a subprocess the worker runs).

    python -m cachekeeper.backends.tpu.launch --standalone --nproc_per_node=N -m cachekeeper.backends.tpu.build JOB

Tensor parallel: 0.2.0's worker configuration needs TORCH_TPU_SLICEBUILDER_ADDRESSES, which only its own
helper sets. So this parent calls `set_tpu_launch_env(nproc_per_node=N)` (`torch.tpu.distributed`, the
same function as `torch_tpu._internal.distributed.distributed`) and then hands the argv to torchrun, as
the helper's docstring composes them. With WORLD_SIZE set the runtime overwrites TPU_VISIBLE_CHIPS,
TPU_PROCESS_BOUNDS, TPU_CHIPS_PER_PROCESS_BOUNDS, TPU_PROCESS_PORT and TPU_PROCESS_ADDRESSES (glue
library strings), so a `build.workers` slot cannot place the ranks: they take the chips the runtime
picks, as a tensor-parallel server does. The slot's variables are dropped, and the build holds the host's
chip lock exclusively, while single-chip slot builds hold it shared (`chip_lock`): a TP build never
runs beside them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ... import settings

# What build.workers sets for one slot (TPUBackend.device_env); the runtime overwrites these under WORLD_SIZE.
SLOT_VARS = ("TPU_VISIBLE_CHIPS", "TPU_PROCESS_BOUNDS", "TPU_CHIPS_PER_PROCESS_BOUNDS", "TPU_PROCESS_PORT",
             "TPU_PROCESS_ADDRESSES", "CLOUD_TPU_TASK_ID", "TPU_VISIBLE_DEVICES")


def lock_path() -> Path:
    return settings.TPU_CHIP_LOCK.get() or Path(tempfile.gettempdir()) / "cachekeeper-tpu-chips.lock"


@contextlib.contextmanager
def chip_lock(exclusive: bool) -> Iterator[None]:
    """The host's chips: shared by single-chip slot builds, exclusive for a tensor-parallel build."""
    path = lock_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def nproc(argv: list[str]) -> int:
    for arg in argv:
        if arg.startswith("--nproc_per_node="):
            return int(arg.partition("=")[2])
    raise SystemExit("usage: python -m cachekeeper.backends.tpu.launch --nproc_per_node=N ... (torchrun args)")


def set_launch_env(n: int) -> None:
    """The package's own helper; public as torch.tpu.distributed once the device is loaded."""
    import torch

    helpers = getattr(getattr(torch, "tpu", None), "distributed", None)
    if helpers is None or not hasattr(helpers, "set_tpu_launch_env"):
        import importlib

        helpers = importlib.import_module("torch_tpu._internal.distributed.distributed")
    helpers.set_tpu_launch_env(nproc_per_node=n)


def main(argv: list[str]) -> int:
    n = nproc(argv)
    for var in SLOT_VARS:
        os.environ.pop(var, None)
    try:
        with chip_lock(exclusive=True):
            try:
                set_launch_env(n)
            except (ImportError, ValueError, RuntimeError) as exc:
                print(f"cachekeeper-build: error: tpu: set_tpu_launch_env(nproc_per_node={n}): {exc}",
                      file=sys.stderr)
                return 1
            from torch.distributed.run import main as torchrun

            torchrun(argv)
    finally:
        # The ranks shared the build's private tier-2 cache: removed once, after all of them exited.
        from .probes import remove_private_tier2

        if problem := remove_private_tier2(os.environ):
            print(f"cachekeeper-build: warning: {problem}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
