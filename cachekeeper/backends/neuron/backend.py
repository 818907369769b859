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
from typing import ClassVar

from ..base import BuildJob
from ..toolchain import DeviceBackend, DeviceToolchain, cache_workdir, choose, normalize_flags, require_choice
from . import probes

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

TOOLCHAIN = DeviceToolchain(
    package="torch_neuronx", device="neuron", compile_backend="neuron", dist_backend="neuron",
    eager_modes=("eager",), build_module="cachekeeper.backends.neuron.build",
    # <k0k1>/<k2k3>/<32 hex key>.neff, the shard dirs being the key's first two byte pairs. The runtime
    # writes `.tmp.XXXXXX` temps beside them and keeps its locks elsewhere.
    artifact=re.compile(r"([0-9a-f]{2})/([0-9a-f]{2})/\1\2[0-9a-f]{28}\.neff"),
    knobs=KNOBS, other_env=("NEURON_RT_VIRTUAL_CORE_SIZE", "TORCH_NEURONX_COMPLEX_DECOMPOSE"),
    cache_off={DISABLE_ENV: None},
)


def knob_values(options: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    values = {k: choose(options, k, env, var, default) for k, (var, default) in KNOBS.items()}
    if values["target"] == probes.UNKNOWN:
        values["target"] = probes.probe_target(env)
    values["target"] = probes.family_of(values["target"]) or values["target"]
    values["cc_flags"] = normalize_flags(values["cc_flags"])
    return values


class NeuronBackend(DeviceBackend):
    name: ClassVar[str] = "neuron"
    env_var: ClassVar[str] = "TORCH_NEURONX_NEFF_CACHE_DIR"
    modes: ClassVar[tuple[str, ...]] = ("eager", "full", "repeated_blocks")
    can_offload: ClassVar[bool] = False  # its graphs live on the device: no CPU offload
    default_cache_dir: ClassVar[str | None] = DEFAULT_CACHE_DIR
    dists: ClassVar[tuple[str, ...]] = DISTS
    install_hint: ClassVar[str] = INSTALL_HINT
    toolchain: ClassVar[DeviceToolchain] = TOOLCHAIN

    def knob_fields(self, options: Mapping[str, str]) -> dict[str, str]:
        knobs = knob_values(options, self.env)
        if "target" in options:
            require_choice(self.name, "target", knobs["target"], probes.TARGETS)
        return knobs

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

    def build_env(self, job: BuildJob) -> dict[str, str]:
        return {LOCAL_CACHE_ENV: str(cache_workdir(job) / "neff_locks")}

    # build.workers: each build gets a range of NeuronCores (NEURON_RT_VISIBLE_CORES="first-last").
    device_unit: ClassVar[str] = "NeuronCore"

    def build_devices(self, options: Mapping[str, str]) -> int | None:
        return probes.core_count(options, self.env)

    def device_env(self, ids: Sequence[int]) -> dict[str, str]:
        # Ids count the cores this worker sees: offset them by the start of its own visible range.
        base = int(self.env.get("NEURON_RT_VISIBLE_CORES", "0").split("-")[0].split(",")[0] or 0)
        first, last = base + ids[0], base + ids[-1]
        return {"NEURON_RT_VISIBLE_CORES": f"{first}-{last}" if last > first else str(first)}
