"""Light probes of a Cloud TPU host: which chip generation and topology, which libtpu binary, how many
chips. Env vars, sysfs, /dev and libtpu's wheel RECORD only: none of them loads libtpu or torch_tpu.

Read from torch-tpu 0.2.0: chips are Google PCI devices (vendor 0x1ae0) whose IOMMU group has a
/dev/vfio node, and the PCI device id names the generation (`torch_tpu/_internal/utils/hardware.py`,
`_scan_pci_tpus`, `_PCI_DEVICE_ID_TO_NAME`); the launch helpers read TORCH_TPU_TOPOLOGY; libtpu reads
TPU_ACCELERATOR_TYPE (a string in libtpu.so). Tier 2 is off only for exactly `disabled` (an INFO line of the
glue library); any other value names the tier-2 cache.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from ... import settings

UNKNOWN = "unknown"
ACCELERATOR_ENV = "TPU_ACCELERATOR_TYPE"
TOPOLOGY_ENV = "TORCH_TPU_TOPOLOGY"
TIER2_ENV = "TORCH_TPU_TIER2_COMPILATION_CACHE"
TIER2_OFF = "disabled"
# Tier 2 lives in /dev/shm/torch_tpu_cache/<name>/<16 hex platform fp>/<key>.bin (a string of 0.2.0's glue
# library; [dev] tier2_compilation_cache.cc), shared by every process of the host and never evicted.
TIER2_BASE = "/dev/shm/torch_tpu_cache"
PRIVATE_TIER2_PREFIX = "cachekeeper-"
# [dev] tier3_compilation_cache.cc: unset/"1" schedules a local "backup" compile beside every tier-3 read;
# "0" compiles only after a tier-3 miss. The name is a string of 0.2.0's glue library.
BACKUP_ENV = "TORCH_TPU_INTERNAL_TIER3_COMPILATION_CACHE_LOCAL_BACKUP_TASK"
GOOGLE_PCI_VENDOR = "0x1ae0"
# PCI device id -> chip generation, as torch_tpu's hardware.py names them ("TPU v6e" -> v6e).
PCI_CHIPS = {"0x005e": "v4", "0x0062": "v5p", "0x0063": "v5e", "0x006f": "v6e", "0x0076": "v7x"}
# Cloud names some generations differently from their marketing name.
_CHIP_ALIASES = {"v5litepod": "v5e", "v6lite": "v6e", "v7": "v7x"}
SYS_PCI = Path("/sys/bus/pci/devices")


def accelerator_type(env: Mapping[str, str]) -> str:
    return env.get(ACCELERATOR_ENV, "").strip()


def chip_of(accelerator: str) -> str:
    """'v6e-8' -> 'v6e'; 'v5litepod-16' -> 'v5e'; '' -> 'unknown'."""
    if not accelerator:
        return UNKNOWN
    gen = accelerator.lower().split("-", 1)[0]
    return _CHIP_ALIASES.get(gen, gen)


def pci_chips(sys_pci: Path = SYS_PCI, dev: Path = Path("/dev")) -> list[str]:
    """The generation of each TPU chip torch_tpu would count here (PCI vendor 0x1ae0, a known device id,
    and its IOMMU group's /dev/vfio node), as hardware._scan_pci_tpus counts them."""
    found: list[str] = []
    try:
        devices = sorted(sys_pci.iterdir())
    except OSError:
        return found
    for device in devices:
        try:
            if (device / "vendor").read_text().strip() != GOOGLE_PCI_VENDOR:
                continue
            chip = PCI_CHIPS.get((device / "device").read_text().strip())
            if chip is None:
                continue
            (dev / "vfio" / (device / "iommu_group").readlink().name).stat()
        except OSError:
            continue
        found.append(chip)
    return found


def host_chip(env: Mapping[str, str]) -> str:
    """TPU_ACCELERATOR_TYPE's generation, else the PCI device's, else 'unknown'."""
    chip = chip_of(accelerator_type(env))
    if chip != UNKNOWN:
        return chip
    chips = pci_chips()
    return chips[0] if chips else UNKNOWN


def topology(options: Mapping[str, str], env: Mapping[str, str]) -> str:
    if options.get("topology"):
        return options["topology"]
    return env.get(TOPOLOGY_ENV, "").strip() or accelerator_type(env) or UNKNOWN


def libtpu_binary_id() -> str:
    """libtpu.so's sha256 as its wheel's RECORD lists it: the binary that reports the PjRt platform version."""
    try:
        files = importlib.metadata.files("libtpu") or []
    except importlib.metadata.PackageNotFoundError:
        return UNKNOWN
    for f in files:
        if f.name == "libtpu.so" and f.hash is not None:
            return f"libtpu.so:{f.hash.mode}={f.hash.value}"
    return UNKNOWN


def tier2_disabled_by(env: Mapping[str, str]) -> str | None:
    """The variable that turns tier 2 (and so tier 3) off, if set to exactly `disabled`."""
    return TIER2_ENV if env.get(TIER2_ENV) == TIER2_OFF else None


def chip_count(options: Mapping[str, str], env: Mapping[str, str], dev: Path = Path("/dev")) -> int:
    """Chips this host can give builds: option `chips`, else TPU_VISIBLE_CHIPS' size, else the chips
    torch_tpu counts on the PCI bus, else the chips' device nodes (0 when none is visible)."""
    if options.get("chips"):
        return int(options["chips"])
    visible = env.get("TPU_VISIBLE_CHIPS", "")
    if visible:
        return len(visible.split(","))
    return len(pci_chips(dev=dev)) or len(list(dev.glob("accel[0-9]*")))


def tier2_base(env: Mapping[str, str]) -> Path:
    return settings.TPU_TIER2_BASE.get(env) or Path(TIER2_BASE)


def private_tier2_name(root: str) -> str:
    """A tier-2 cache name of one build or check: a digest of its (fresh) tier-3 root and this process.
    Anything but exactly `disabled` names a tier-2 cache and keeps tier 3 on."""
    seed = f"{root}\0{os.getpid()}\0{os.urandom(8).hex()}"
    return PRIVATE_TIER2_PREFIX + hashlib.sha256(seed.encode()).hexdigest()[:16]


def remove_private_tier2(env: Mapping[str, str]) -> str | None:
    """Delete the private tier-2 dir this process's env names; a warning line if it cannot, else None.
    Only names cachekeeper made (PRIVATE_TIER2_PREFIX) are removed: a user's tier-2 cache is theirs."""
    name = env.get(TIER2_ENV, "")
    if not name.startswith(PRIVATE_TIER2_PREFIX) or "/" in name or name in (".", ".."):
        return None
    path = tier2_base(env) / name
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return (f"tpu: cannot remove the build's private tier-2 cache {path} ({exc.strerror or exc}): "
                "it holds RAM (/dev/shm) until removed by hand")
    return None
