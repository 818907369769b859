"""Light probes of a Trainium host: which target family (trn2/trn3) the runtime compiles for.

Order, first answer wins: NEURON_PLATFORM_TARGET_OVERRIDE (the runtime's own override), the Neuron
driver's sysfs (`/sys/devices/virtual/neuron_device/neuron0/info/architecture/{instance_type,device_name}`),
the EC2 instance type in DMI (`/sys/devices/virtual/dmi/id/product_name`, e.g. "trn2.48xlarge"), then
`neuron-ls --json-output` (instance type field, 5 s timeout). None of them loads the runtime.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

TARGETS = ("trn2", "trn3")
TARGET_OVERRIDE_ENV = "NEURON_PLATFORM_TARGET_OVERRIDE"
SYSFS = Path("/sys/devices/virtual/neuron_device/neuron0/info/architecture")
DMI_PRODUCT = Path("/sys/devices/virtual/dmi/id/product_name")
UNKNOWN = "unknown"

_FAMILY = re.compile(r"\b(trn\d)")
_DEVICE_NAME = re.compile(r"trainium\s*(\d)", re.IGNORECASE)


def family_of(text: str) -> str | None:
    """'trn2.48xlarge' / 'trn2u.48xlarge' -> 'trn2'; 'Trainium3' -> 'trn3'; anything else -> None."""
    if m := _FAMILY.search(text.lower()):
        return m.group(1)
    if m := _DEVICE_NAME.search(text):
        return f"trn{m.group(1)}"
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return ""


def from_sysfs(sysfs: Path = SYSFS, dmi: Path = DMI_PRODUCT) -> str | None:
    for path in (sysfs / "instance_type", sysfs / "device_name", dmi):
        if family := family_of(_read(path)):
            return family
    return None


def from_neuron_ls(timeout: float = 5.0) -> str | None:
    exe = shutil.which("neuron-ls")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--json-output"], capture_output=True, text=True, timeout=timeout,
                             check=False).stdout
        data = json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    # A list of devices (older tools) or an object; the instance type sits in either.
    for item in data if isinstance(data, list) else [data]:
        if isinstance(item, dict) and (family := family_of(str(item.get("instance_type", "")))):
            return family
    return None


def probe_target(env: Mapping[str, str], sysfs: Path = SYSFS, dmi: Path = DMI_PRODUCT) -> str:
    """The target family this host compiles for, or 'unknown'."""
    override = env.get(TARGET_OVERRIDE_ENV, "").strip()
    if override:
        return family_of(override) or override
    return from_sysfs(sysfs, dmi) or from_neuron_ls() or UNKNOWN


def core_count(options: Mapping[str, str], env: Mapping[str, str], sysfs_root: Path = SYSFS.parents[2]) -> int:
    """NeuronCores this host can give builds: option `cores`, else NEURON_RT_VISIBLE_CORES' size, else
    the driver's devices times their `core_count` (0 when no driver is visible)."""
    if options.get("cores"):
        return int(options["cores"])
    visible = env.get("NEURON_RT_VISIBLE_CORES", "")
    if visible:
        first, _, last = visible.partition("-")
        return int(last) - int(first) + 1 if last else len(visible.split(","))
    total = 0
    for dev in sorted(sysfs_root.glob("neuron[0-9]*")):
        try:
            total += int((dev / "core_count").read_text().strip())
        except (OSError, ValueError):
            continue
    return total
