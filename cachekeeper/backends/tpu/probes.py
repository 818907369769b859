"""Light probes of a Cloud TPU host: which chip generation and topology, which libtpu binary, how many
chips. Env vars, /dev and libtpu's wheel RECORD only: none of them loads libtpu or torch_tpu.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping
from pathlib import Path

UNKNOWN = "unknown"
ACCELERATOR_ENVS = ("ACCELERATOR_TYPE", "TPU_ACCELERATOR_TYPE")
TOPOLOGY_ENVS = ("TPU_TOPOLOGY", "TORCH_TPU_TOPOLOGY")
TIER2_ENV = "TORCH_TPU_TIER2_COMPILATION_CACHE"
TIER2_INTERNAL_ENV = "TORCH_TPU_INTERNAL_TIER2_COMPILATION_CACHE"
# Cloud names some generations differently from their marketing name.
_CHIP_ALIASES = {"v5litepod": "v5e", "v6lite": "v6e"}


def accelerator_type(env: Mapping[str, str]) -> str:
    return next((env[v].strip() for v in ACCELERATOR_ENVS if env.get(v, "").strip()), "")


def chip_of(accelerator: str) -> str:
    """'v6e-8' -> 'v6e'; 'v5litepod-16' -> 'v5e'; '' -> 'unknown'."""
    if not accelerator:
        return UNKNOWN
    gen = accelerator.lower().split("-", 1)[0]
    return _CHIP_ALIASES.get(gen, gen)


def topology(options: Mapping[str, str], env: Mapping[str, str]) -> str:
    if options.get("topology"):
        return options["topology"]
    found = next((env[v].strip() for v in TOPOLOGY_ENVS if env.get(v, "").strip()), "")
    return found or accelerator_type(env) or UNKNOWN


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
    """The variable that turns tier 2 (and so tier 3) off, if any; the public one wins when both are set."""
    if TIER2_ENV in env:
        return TIER2_ENV if env[TIER2_ENV] == "disabled" else None
    return TIER2_INTERNAL_ENV if env.get(TIER2_INTERNAL_ENV) == "disabled" else None


def chip_count(options: Mapping[str, str], env: Mapping[str, str], dev: Path = Path("/dev")) -> int:
    """Chips this host can give builds: option `chips`, else TPU_VISIBLE_CHIPS' size, else the chips'
    device nodes (0 when none is visible)."""
    if options.get("chips"):
        return int(options["chips"])
    visible = env.get("TPU_VISIBLE_CHIPS", "")
    if visible:
        return len(visible.split(","))
    return len(list(dev.glob("accel[0-9]*"))) or len(list((dev / "vfio").glob("[0-9]*")))
