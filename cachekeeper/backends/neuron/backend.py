"""TorchNeuron's NEFF cache: what its key misses, which files are artifacts, how a build runs.

The runtime keys a NEFF on the IR, the target family, the logical core config, the opt level and the
compiler args, but not on the neuronx-cc (or torch-neuronx) version: after an upgrade it silently reuses
old NEFFs. Our fingerprint adds both versions, and a hydrated dir holds one fingerprint only.

Fingerprint fields:
  torch, torch_neuronx, neuronx_cc   versions from importlib.metadata
  target              option `target`, else NEURON_PLATFORM_TARGET_OVERRIDE, else probed (probes.py); the
                      runtime takes it from the device (0.1.0 never reads the override), so a build whose
                      runtime reports another target fails, and records the runtime's target and LNC
  logical_nc_config   option, else NEURON_LOGICAL_NC_CONFIG, else 2 (the runtime default)
  opt_level           option, else NEURON_COMPILER_OPT_LEVEL, else "default" (-O1 eager, -O2 compile)
  cc_flags            option, else NEURON_CC_FLAGS, byte for byte: the runtime's key takes the raw string
                      (0.1.0 KernelExecution.cpp), so two spellings of the same flags are two keys
  env.NEURON_RT_VIRTUAL_CORE_SIZE, env.TORCH_NEURONX_COMPLEX_DECOMPOSE   other output-changing env
  option.*            any other backend option (e.g. warm-up text_len): it may change the graph
Pins (`torch_version`, `torch_neuronx_version`, `neuronx_cc_version`) are checked, not recorded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from ...bounds import BUILD_TIMEOUT
from ...errors import BackendUnavailable
from ..base import BuildCommand, BuildJob
from ..toolchain import DeviceBackend, DeviceToolchain, cache_workdir, choose, require_choice
from . import probes

DISTS = ("torch", "torch-neuronx", "neuronx-cc")
INSTALL_HINT = "pip install torch-neuronx neuronx-cc from the Neuron pip repository"
DEFAULT_CACHE_DIR = "/tmp/neff_cache"
LOCAL_CACHE_ENV = "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR"   # per-key flock files, never published
DISABLE_ENV = "TORCH_NEURONX_NEFF_DISABLE_CACHE"
METRICS_ENV = "TORCH_NEURONX_METRICS_ENABLED"          # counters count only with it ("1") at start-up
LOCK_TIMEOUT_ENV = "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT"  # default 1200 s, then a waiter breaks the lock
NKI_TRACE_CACHE_ENV = "NKI_ENABLE_TRACE_CACHE"        # reportedly on by default; can serve stale kernels
VISIBLE_CORES_ENV = "NEURON_RT_VISIBLE_CORES"
CC_FLAGS_ENV = "NEURON_CC_FLAGS"
LNC_ENV = "NEURON_LOGICAL_NC_CONFIG"
OPT_LEVEL_ENV = "NEURON_COMPILER_OPT_LEVEL"
# Change NEFF bytes without changing the key (Neuron docs, neuron-explorer troubleshooting): a build drops them.
DEBUG_ENV = ("NEURON_FRAMEWORK_DEBUG", "NKI_DEBUG_INFO", "XLA_IR_DEBUG", "XLA_HLO_DEBUG")
_COUNTERS = "cachekeeper.backends.neuron.counters"

# option -> (env var the runtime reads, default when neither is set); each is one fingerprint field.
KNOBS: dict[str, tuple[str, str]] = {
    "target": (probes.TARGET_OVERRIDE_ENV, probes.UNKNOWN),
    "logical_nc_config": (LNC_ENV, "2"),
    "opt_level": (OPT_LEVEL_ENV, "default"),
    "cc_flags": (CC_FLAGS_ENV, ""),
}

TOOLCHAIN = DeviceToolchain(
    package="torch_neuronx", device="neuron", compile_backend="neuron", dist_backend="neuron",
    eager_modes=("eager",), build_module="cachekeeper.backends.neuron.build",
    # C++ path: <k0k1>/<k2k3>/<32 hex key>.neff, the shard dirs being the key's first two byte pairs; the
    # runtime writes `.tmp.XXXXXX` temps beside them and keeps its locks elsewhere. Python path (sync eager
    # with NEURON_LAUNCH_BLOCKING=1, the Python kernels; 0.1.0 kernels/compiler_subprocess.py):
    # <64 hex>/<64 hex>.neff, the same digest twice, with `tmp*.tmp` temps.
    artifact=re.compile(r"([0-9a-f]{2})/([0-9a-f]{2})/\1\2[0-9a-f]{28}\.neff|([0-9a-f]{64})/\3\.neff"),
    knobs=KNOBS, other_env=("NEURON_RT_VIRTUAL_CORE_SIZE", "TORCH_NEURONX_COMPLEX_DECOMPOSE"),
    cache_off={DISABLE_ENV: None},
    # 0.1.0 torch_neuronx/metrics.py: CompilationCache.TotalCompilations / PersistentHits, with metrics on.
    counters={"compiled": f"{_COUNTERS}:compiled", "loaded": f"{_COUNTERS}:loaded"},
    dropped_env={var: "it changes NEFF bytes but not the runtime's key" for var in DEBUG_ENV},
)


def knob_values(options: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """The knobs as the runtime keys on them: verbatim (NEURON_CC_FLAGS byte for byte); the target as a family."""
    values = {k: choose(options, k, env, var, default) for k, (var, default) in KNOBS.items()}
    if values["target"] == probes.UNKNOWN:
        values["target"] = probes.probe_target(env)
    values["target"] = probes.family_of(values["target"]) or values["target"]
    return values


def rank_cores(visible: str, local_rank: int) -> str:
    """One NeuronCore of a slot's range for one tensor-parallel rank: first core + LOCAL_RANK.
    `init_process_group("neuron")` sets NEURON_RT_VISIBLE_CORES=<local rank> only when it is unset (0.1.0
    torch_neuronx/distributed/backend.py, _set_rt_visible_cores), so a preset range would reach every rank."""
    first_text = visible.split(",")[0].split("-")[0].strip()
    return str(int(first_text) + local_rank)


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

    def env_exports(self, dest: Path) -> dict[str, str]:
        """The dir, and the knobs exactly as the hydrated fingerprint has them: the runtime keys on the raw
        NEURON_CC_FLAGS, the LNC and the opt level, so a server must run with the build's spelling."""
        fields = dict(self.last_fingerprint().fields)
        out = {self.env_var: str(dest), CC_FLAGS_ENV: fields["cc_flags"], LNC_ENV: fields["logical_nc_config"]}
        if fields["opt_level"] != "default":
            out[OPT_LEVEL_ENV] = fields["opt_level"]
        return out

    def device_reason(self, options: Mapping[str, str]) -> str | None:
        if probes.core_count(options, self.env) or probes.from_sysfs() or probes.from_neuron_ls():
            return None
        return ("no NeuronCore on this host: no Neuron driver devices in sysfs, no NEURON_RT_VISIBLE_CORES, "
                "no neuron-ls")

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
            if option in options and var in env and option != "target" and env[var] != options[option]:
                same = " ".join(env[var].split()) == " ".join(options[option].split())
                what = "spelled differently from" if same else "not"
                out.append(f"{var}={env[var]!r} is {what} the build's {option} {options[option]!r}: the runtime "
                           f"keys on the exact string; hydrate --print-env exports the build's")
        for var in DEBUG_ENV:
            if env.get(var):
                out.append(f"{var} is set: it changes NEFF bytes but not the runtime's key (builds drop it)")
        return out

    def build_env(self, job: BuildJob) -> dict[str, str]:
        return {
            LOCAL_CACHE_ENV: str(cache_workdir(job) / "neff_locks"),
            # the counters the build reports (and the device check judges) count only with metrics on
            METRICS_ENV: "1",
            # kernels traced in this build, not replayed from another run's trace cache
            NKI_TRACE_CACHE_ENV: "0",
            # a waiting rank never breaks a lock before the build itself would have timed out
            LOCK_TIMEOUT_ENV: str(int(BUILD_TIMEOUT.high)),
        }

    def build_command(self, job: BuildJob) -> BuildCommand:
        expected = knob_values(job.options, self.env)["target"]
        probed = probes.from_sysfs() or probes.from_neuron_ls()
        if expected in probes.TARGETS and probed and probed != expected:
            raise BackendUnavailable.of(self.name, f"the build's target is {expected} but this host's device is "
                                        f"{probed}: the runtime keys NEFFs on the device's target and never reads "
                                        f"{probes.TARGET_OVERRIDE_ENV}",
                                        f"build {expected} entries on a {expected} host")
        cmd = super().build_command(job)
        if "target" in job.options and probes.TARGET_OVERRIDE_ENV not in self.env:
            cmd.env.pop(probes.TARGET_OVERRIDE_ENV, None)   # not the runtime's: it would only mislead
        return cmd

    # build side -----------------------------------------------------------------------------------------

    def rank_env(self, env: Mapping[str, str]) -> dict[str, str]:
        if int(env.get("WORLD_SIZE", "1")) > 1 and env.get(VISIBLE_CORES_ENV):
            return {VISIBLE_CORES_ENV: rank_cores(env[VISIBLE_CORES_ENV], int(env.get("LOCAL_RANK", "0")))}
        return {}

    def runtime_facts(self, job: BuildJob) -> dict[str, Any]:
        """The runtime's own platform target and LNC (torch_neuronx.utils); a build for another target stops."""
        import importlib

        try:
            utils = importlib.import_module("torch_neuronx.utils")
            target, lnc = str(utils.get_platform_target()), str(utils.get_lnc_setting())
        except (ImportError, AttributeError, RuntimeError) as exc:
            return {"platform_target": None, "lnc": None, "why": f"torch_neuronx.utils: {exc}"}
        family = probes.family_of(target) or target
        knobs = knob_values(job.options, self.env)
        if knobs["target"] in probes.TARGETS and family != knobs["target"]:
            raise BackendUnavailable.of(self.name, f"the build's target is {knobs['target']} but the runtime "
                                        f"compiles for {family} (torch_neuronx.utils.get_platform_target()): the "
                                        "NEFFs would be published under the wrong target",
                                        f"build {knobs['target']} entries on a {knobs['target']} host")
        return {"platform_target": family, "lnc": lnc}

    # build.workers: each build gets a range of NeuronCores (NEURON_RT_VISIBLE_CORES="first-last").
    device_unit: ClassVar[str] = "NeuronCore"

    def build_devices(self, options: Mapping[str, str]) -> int | None:
        return probes.core_count(options, self.env)

    def device_env(self, ids: Sequence[int]) -> dict[str, str]:
        # Ids count the cores this worker sees: offset them by the start of its own visible range.
        base = int(self.env.get("NEURON_RT_VISIBLE_CORES", "0").split("-")[0].split(",")[0] or 0)
        first, last = base + ids[0], base + ids[-1]
        return {"NEURON_RT_VISIBLE_CORES": f"{first}-{last}" if last > first else str(first)}
