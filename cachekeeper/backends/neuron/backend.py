"""TorchNeuron's NEFF cache: what its key misses, which files are artifacts, how a build runs.

The runtime keys a NEFF on the IR, the target family, the logical core config, the opt level and the
compiler args, but not on the neuronx-cc (or torch-neuronx) version: after an upgrade it silently reuses
old NEFFs. Our fingerprint adds both versions, and a hydrated dir holds one fingerprint only.

Fingerprint fields:
  torch, torch_neuronx, neuronx_cc   versions from importlib.metadata
  target              option `target`, else NEURON_PLATFORM_TARGET_OVERRIDE, else probed (probes.py)
  logical_nc_config   option, else NEURON_LOGICAL_NC_CONFIG, else 2 (the runtime default)
  opt_level           option, else NEURON_COMPILER_OPT_LEVEL, else "default" (-O1 eager, -O2 compile)
  cc_flags            option, else NEURON_CC_FLAGS (whitespace-normalised)
  env.NEURON_RT_VIRTUAL_CORE_SIZE, env.TORCH_NEURONX_COMPLEX_DECOMPOSE   other output-changing env
  option.*            any other backend option (e.g. warm-up text_len): it may change the graph
Pins (`torch_version`, `torch_neuronx_version`, `neuronx_cc_version`) are checked, not recorded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from ...fingerprint import Fingerprint
from .. import MODES
from .._common import (
    PackagedBackend,
    cache_workdir,
    choose,
    env_fields,
    module_command,
    non_empty,
    normalize_flags,
    option_fields,
    require_choice,
)
from ..base import CACHE_ROOT, BuildCommand, BuildJob
from . import probes

BUILD_MODULE = "cachekeeper.backends.neuron.build"
DISTS = ("torch", "torch-neuronx", "neuronx-cc")
INSTALL_HINT = "pip install torch-neuronx neuronx-cc from the Neuron pip repository"
DEFAULT_CACHE_DIR = "/tmp/neff_cache"
LOCAL_CACHE_ENV = "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR"   # per-key flock files, never published
DISABLE_ENV = "TORCH_NEURONX_NEFF_DISABLE_CACHE"

# option -> (env var the runtime reads, default when neither is set); each is one fingerprint field.
KNOBS: dict[str, tuple[str, str]] = {
    "target": (probes.TARGET_OVERRIDE_ENV, probes.UNKNOWN),
    "logical_nc_config": ("NEURON_LOGICAL_NC_CONFIG", "2"),
    "opt_level": ("NEURON_COMPILER_OPT_LEVEL", "default"),
    "cc_flags": ("NEURON_CC_FLAGS", ""),
}
OTHER_ENV = ("NEURON_RT_VIRTUAL_CORE_SIZE", "TORCH_NEURONX_COMPLEX_DECOMPOSE")

# <k0k1>/<k2k3>/<32 hex key>.neff, the shard dirs being the key's first two byte pairs.
_NEFF = re.compile(r"([0-9a-f]{2})/([0-9a-f]{2})/\1\2[0-9a-f]{28}\.neff")


def knob_values(options: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    values = {k: choose(options, k, env, var, default) for k, (var, default) in KNOBS.items()}
    if values["target"] == probes.UNKNOWN:
        values["target"] = probes.probe_target(env)
    values["target"] = probes.family_of(values["target"]) or values["target"]
    values["cc_flags"] = normalize_flags(values["cc_flags"])
    return values


class NeuronBackend(PackagedBackend):
    dists: ClassVar[tuple[str, ...]] = DISTS
    install_hint: ClassVar[str] = INSTALL_HINT
    name: ClassVar[str] = "neuron"
    env_var: ClassVar[str] = "TORCH_NEURONX_NEFF_CACHE_DIR"
    modes: ClassVar[tuple[str, ...]] = MODES["neuron"]
    default_cache_dir: ClassVar[str | None] = DEFAULT_CACHE_DIR

    def fingerprint(self, options: Mapping[str, str]) -> Fingerprint:
        versions = self.versions(options)
        knobs = knob_values(options, self.env)
        if "target" in options:
            require_choice(self.name, "target", knobs["target"], probes.TARGETS)
        fields: dict[str, str] = {d.replace("-", "_"): v for d, v in versions.items()}
        fields.update(knobs)
        fields.update(env_fields(self.env, OTHER_ENV))
        fields.update(option_fields(options, frozenset(KNOBS)))
        return Fingerprint.of(self.name, fields)

    def env_warnings(self, options: Mapping[str, str]) -> list[str]:
        env, out = self.env, []
        if env.get(DISABLE_ENV, "").lower() in ("1", "true", "yes"):
            out.append(f"{DISABLE_ENV}={env[DISABLE_ENV]}: the runtime ignores the NEFF cache, hydrated or not")
        probed = probes.probe_target(env)
        if probed == probes.UNKNOWN and "target" not in options:
            out.append("target family unknown (no Neuron sysfs, DMI or neuron-ls): set backend_options.neuron.target")
        elif "target" in options and probed not in (probes.UNKNOWN, options["target"]):
            out.append(f"config target {options['target']} but this host is {probed}: the runtime compiles for "
                       f"{probed} and will not use {options['target']} NEFFs")
        for option, (var, _) in KNOBS.items():
            if option in options and var in env and option != "target" \
                    and normalize_flags(env[var]) != normalize_flags(options[option]):
                out.append(f"config {option}={options[option]!r} but {var}={env[var]!r}: the runtime follows {var}")
        return out

    def include(self, root: str, relpath: str, path: Path) -> bool:
        # Only NEFFs at their sharded path: the runtime writes `.tmp.XXXXXX` temps beside them and keeps its
        # locks elsewhere; an empty NEFF is a miss to the runtime, so it is not worth shipping.
        return root == CACHE_ROOT and _NEFF.fullmatch(relpath) is not None and non_empty(path)

    def build_command(self, job: BuildJob) -> BuildCommand:
        self.versions(job.options)
        env = {
            self.env_var: job.roots[CACHE_ROOT],
            LOCAL_CACHE_ENV: str(cache_workdir(job) / "neff_locks"),
            # Import torch_neuronx explicitly (build.py) rather than through autoload: one device package
            # per build, whatever else is installed.
            "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
        }
        env.update({var: job.options[k] for k, (var, _) in KNOBS.items() if job.options.get(k)})
        cmd = module_command(BUILD_MODULE, job, env)
        cmd.env.pop(DISABLE_ENV, None)  # a build exists to fill the cache
        return cmd

    # build.workers: each build gets a range of NeuronCores (NEURON_RT_VISIBLE_CORES="first-last").
    device_unit: ClassVar[str] = "NeuronCore"

    def build_devices(self, options: Mapping[str, str]) -> int | None:
        return probes.core_count(options, self.env)

    def device_env(self, ids: Sequence[int]) -> dict[str, str]:
        # Ids count the cores this worker sees: offset them by the start of its own visible range.
        base = int(self.env.get("NEURON_RT_VISIBLE_CORES", "0").split("-")[0].split(",")[0] or 0)
        first, last = base + ids[0], base + ids[-1]
        return {"NEURON_RT_VISIBLE_CORES": f"{first}-{last}" if last > first else str(first)}
