"""Run inside the real torch-tpu environment (.venv-tpu) by test_tpu_real.py: what the installed package
exposes, as one JSON object on stdout's last line. Autoload is off (as every cachekeeper build sets it),
so what loads the package's device is cachekeeper's own loader, watched through a spy on `load()`."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import inspect
import json
import sys
from pathlib import Path
from typing import Any


def main() -> dict[str, Any]:
    import torch
    import torch_tpu
    import torch_tpu._loader as loader

    facts: dict[str, Any] = {"old_autoload": loader._OLD_AUTOLOAD_ENV, "loaded_at_import": loader._LOADED}
    calls: list[int] = []
    real_load = loader.load

    def spy() -> None:
        calls.append(1)
        real_load()

    loader.load = spy
    from cachekeeper.backends.build_main import load_device_package, runtime_counters
    from cachekeeper.backends.tpu import TPUBackend, probes
    from cachekeeper.backends.tpu.backend import TOOLCHAIN
    from cachekeeper.errors import BackendUnavailable

    try:
        rt = load_device_package(TOOLCHAIN, "tpu", "hint")
        facts["loader_error"] = None
        facts["device"] = rt.device
    except BackendUnavailable as exc:
        facts["loader_error"] = exc.reason
    facts["load_calls"] = len(calls)
    facts["counters"] = runtime_counters(TOOLCHAIN.counters)
    from torch_tpu._internal.device import _device_ops_backend as ops

    stats = ops._get_cache_stats()
    facts["stats_fields"] = sorted(a for a in ("num_cache_reqs", "num_cache_hits", "per_entry_stats")
                                   if hasattr(stats, a))
    facts["ops_so"] = str(Path(ops.__file__))

    from torch_tpu._internal.utils import hardware

    facts["package_chip_count"] = hardware.get_tpu_device_count()
    facts["our_chip_count"] = len(probes.pci_chips())
    dist_module = importlib.import_module("torch_tpu._internal.distributed.distributed")
    facts["set_tpu_launch_env_params"] = list(inspect.signature(dist_module.set_tpu_launch_env).parameters)
    facts["diffusers_launcher_exists"] = (
        importlib.util.find_spec("torch_tpu._internal.distributed.launchers") is not None)
    facts["versions"] = {d: importlib.metadata.version(d) for d in ("torch", "torch-tpu", "libtpu")}
    eps = importlib.metadata.entry_points(group="torch.backends")
    facts["entry_points"] = {ep.name: ep.value for ep in eps}
    record = [f for f in importlib.metadata.files("libtpu") or [] if f.name == "libtpu.so"]
    facts["libtpu_record"] = f"libtpu.so:{record[0].hash.mode}={record[0].hash.value}" if record else None
    facts["libtpu_so"] = str(record[0].locate()) if record else None
    fields = dict(TPUBackend().fingerprint({}).fields)
    facts["fingerprint"] = fields
    torch_mm = ".".join(torch.__version__.split("+")[0].split(".")[:2]).replace(".", "_")
    pkg = Path(torch_tpu.__file__).parent
    facts["package_dir"] = str(pkg)
    facts["glue_so"] = str(pkg / "csrc" / "common" / f"glue_{torch_mm}_0" / f"libpywrap_{torch_mm}_0_common.so")
    return facts


if __name__ == "__main__":
    print(json.dumps(main()), file=sys.stdout)
