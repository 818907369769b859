"""SIMULATION of torch_tpu/_loader.py (torch-tpu 0.2.0): autoload is saved, turned off while torch imports,
and `load()` runs at import only when it was "1" -- else only the `torch.backends` entry point
(`torch_tpu._loader:load`) registers the device. The simulated host has chips, so `load()` always
registers ("tpu" is then served by CPU tensors: `SIMULATION.device`)."""

from __future__ import annotations

import os

_AUTOLOAD_ENV_VAR = "TORCH_DEVICE_BACKEND_AUTOLOAD"
_OLD_AUTOLOAD_ENV = os.getenv(_AUTOLOAD_ENV_VAR, "1")
os.environ[_AUTOLOAD_ENV_VAR] = "0"

import _devicesim  # noqa: E402
import torch  # noqa: E402,F401

_LOADED = False


def load() -> None:
    global _LOADED
    os.environ[_AUTOLOAD_ENV_VAR] = _OLD_AUTOLOAD_ENV
    if _LOADED:
        return
    from torch_tpu._internal.distributed import create_process_group

    _devicesim.register_process_group("tpu_dist", create_process_group)
    _devicesim.make_cpu_an_accelerator_for_diffusers()
    _LOADED = True


if _OLD_AUTOLOAD_ENV == "1":
    load()
