"""TorchTPU's tier-3 compilation cache: what its key misses, which files are artifacts, how a build runs.

Read from the released torch-tpu 0.2.0 (its Python files; strings of
`csrc/common/glue_2_13_0/libpywrap_2_13_0_common.so`; docs/backends.md lists each fact and its source):
tier 3 lives under TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT as `<16 hex platform fingerprint>/<name>.bin`,
name `%016x_%016x_%016x` (shapeless graph, dimensions, compile options) or `%016x_%016x_%016x_%s` when the
key's id_key is set. The platform fingerprint covers a binary-version constant and the PjRt platform and
C API versions; the compile-options key covers XLA_FLAGS, LIBTPU_INIT_ARGS, the device assignment, effort
levels and argument shapes. Neither covers the chip generation, the topology or the torch_tpu/libtpu
versions: our fingerprint adds them. Tier 3 works only while tier 2 is on:
TORCH_TPU_TIER2_COMPILATION_CACHE=disabled turns both off with one INFO line, so boot hooks refuse it.

Tier 2 (/dev/shm/torch_tpu_cache/<name>) is shared by every process of the host, and a tier-2 hit never
writes tier 3 ([dev] compilation_cache.cc, GetFromTier2OrCompile): so every build (and the device check's
server) runs with a tier-2 name of its own, removed when it ends, and writes everything it uses to tier 3.
The runtime's hit/miss counters count tier 1 only; `counters.py` reads `_get_cache_stats()` instead.

Fingerprint fields:
  torch, torch_tpu, libtpu   versions from importlib.metadata
  pjrt_platform      option `pjrt_platform_version`, else libtpu.so's sha256 from libtpu's RECORD (the
                     binary that reports the platform version; read without loading it)
  chip               option `chip`, else TPU_ACCELERATOR_TYPE ("v6e-8" -> v6e), else the PCI device id
  topology           option `topology`, else TORCH_TPU_TOPOLOGY, else the accelerator type
  xla_flags          option, else XLA_FLAGS;  libtpu_init_args  option, else LIBTPU_INIT_ARGS
  env.TORCH_TPU_INTERNAL_XLA_OPTIONS; option.* for any other option (it may change the graph)
Pins (`torch_version`, `torch_tpu_version`, `libtpu_version`) are checked, not recorded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from ...errors import BackendUnavailable, DestinationError
from ..base import CACHE_ROOT, BuildCommand, BuildJob
from ..toolchain import DeviceBackend, DeviceToolchain, add_build_warning, require_choice, unwritable
from . import probes
from .probes import BACKUP_ENV, TIER2_ENV, TIER2_OFF

DISTS = ("torch", "torch-tpu", "libtpu")
INSTALL_HINT = "pip install torch-tpu (from the package registry; it brings libtpu)"
CHIPS = ("v6e", "v7x")
LAUNCH_MODULE = "cachekeeper.backends.tpu.launch"
DEFER_ENV = "TORCH_TPU_DEFER_AND_FUSE"

_COUNTERS = "cachekeeper.backends.tpu.counters"
_OPS = "torch_tpu._internal.device._device_ops_backend"
# Every env var this backend sets or reads that belongs to the runtime's vocabulary (each must exist in the
# released package: tests/backends/test_tpu_real.py looks them up in its Python files and binaries).
RUNTIME_ENV = (
    "TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT", TIER2_ENV, "TORCH_TPU_DEFER_AND_FUSE", "XLA_FLAGS",
    "LIBTPU_INIT_ARGS", "TORCH_TPU_INTERNAL_XLA_OPTIONS", "TORCH_DEVICE_BACKEND_AUTOLOAD",
    probes.ACCELERATOR_ENV, probes.TOPOLOGY_ENV, "TPU_VISIBLE_CHIPS", "TPU_PROCESS_BOUNDS",
    "TPU_CHIPS_PER_PROCESS_BOUNDS", "TPU_PROCESS_PORT", "TPU_PROCESS_ADDRESSES", "CLOUD_TPU_TASK_ID",
    "WORLD_SIZE", "TORCH_TPU_SLICEBUILDER_ADDRESSES", "TPU_VISIBLE_DEVICES", BACKUP_ENV,
)

# option -> (env var the runtime reads, default); each is one fingerprint field.
KNOBS: dict[str, tuple[str, str]] = {
    "xla_flags": ("XLA_FLAGS", ""),
    "libtpu_init_args": ("LIBTPU_INIT_ARGS", ""),
}

TOOLCHAIN = DeviceToolchain(
    package="torch_tpu", device="tpu", compile_backend="tpu", dist_backend="tpu_dist",
    eager_modes=("eager", "defer_and_fuse"), build_module="cachekeeper.backends.tpu.build",
    # Entries only, in both of 0.2.0's name forms (`%016x_%016x_%016x`, and `..._%s` with the key's
    # id_key); the runtime's temps, `<entry>.bin.<host>-<tid hex>-<pid>-<us hex>.<n>.tmp`, never end in .bin.
    artifact=re.compile(r"[0-9a-f]{16}/[0-9a-f]{16}_[0-9a-f]{16}_[0-9a-f]{16}(_[^/]+)?\.bin"),
    knobs=KNOBS, other_env=("TORCH_TPU_INTERNAL_XLA_OPTIONS",),
    # A build must write tier 3, which needs tier 2: it replaces a host setting that disables it (with its
    # private tier-2 name, TPUBackend.build_env).
    cache_off={TIER2_ENV: TIER2_OFF},
    # 0.2.0 registers the `tpu` device in `torch_tpu._loader:load`, its `torch.backends` entry point; a
    # build runs it itself, since `import torch_tpu` under TORCH_DEVICE_BACKEND_AUTOLOAD=0 does not.
    entry_point="torch_tpu",
    # Graphs this process compiled itself / loaded from tier 2 or 3, from `_get_cache_stats()`'s
    # per-entry compilation durations (the hit/miss counters count tier 1 only).
    counters={"compiled": f"{_COUNTERS}:compiled", "loaded": f"{_COUNTERS}:loaded",
              "requests": f"{_COUNTERS}:requests",
              # kept beside them to show the difference: what the old mapping (compiled = misses) read
              "tier1_misses": f"{_OPS}:_get_cache_misses"},
)


class TPUBackend(DeviceBackend):
    name: ClassVar[str] = "tpu"
    env_var: ClassVar[str] = "TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT"
    modes: ClassVar[tuple[str, ...]] = ("eager", "defer_and_fuse", "full", "repeated_blocks")
    default_cache_dir: ClassVar[str | None] = None  # unset: tier 3 is off
    dists: ClassVar[tuple[str, ...]] = DISTS
    install_hint: ClassVar[str] = INSTALL_HINT
    toolchain: ClassVar[DeviceToolchain] = TOOLCHAIN
    field_options: ClassVar[frozenset[str]] = frozenset({"chip", "topology", "pjrt_platform_version"})

    def toolchain_fields(self, options: Mapping[str, str]) -> dict[str, str]:
        chip = options.get("chip") or probes.host_chip(self.env)
        if "chip" in options:
            require_choice(self.name, "chip", chip, CHIPS)
        return {"pjrt_platform": options.get("pjrt_platform_version") or probes.libtpu_binary_id(),
                "chip": chip, "topology": probes.topology(options, self.env)}

    def env_warnings(self, options: Mapping[str, str]) -> list[str]:
        env, out = self.env, []
        if var := probes.tier2_disabled_by(env):
            out.append(f"{var}=disabled turns off tier 2 and with it tier 3: hydrated artifacts are never read")
        root = env.get(self.env_var, "")
        if root.startswith("gs://"):
            out.append(f"{self.env_var}={root}: hydrate fills a local dir; point the runtime at it instead")
        if env.get(DEFER_ENV, "").lower() in ("1", "true"):   # read as a boolean by the glue library
            out.append(f"{DEFER_ENV}=1: eager runs defer and fuse, so only defer_and_fuse entries are used")
        if "chip" not in options and probes.host_chip(env) == probes.UNKNOWN:
            out.append(f"chip unknown ({probes.ACCELERATOR_ENV} unset, no TPU on the PCI bus): "
                       "set backend_options.tpu.chip (v6e|v7x)")
        return out

    def device_reason(self, options: Mapping[str, str]) -> str | None:
        if probes.chip_count(options, self.env):
            return None
        return ("no TPU chip on this host: torch_tpu counts Google PCI devices (vendor 0x1ae0) with a /dev/vfio "
                "group, and registers its 'tpu' device only when it finds one")

    def env_exports(self, dest: Path) -> dict[str, str]:
        if var := probes.tier2_disabled_by(self.env):
            raise BackendUnavailable.of("tpu", f"{var}=disabled turns off tier 2, and tier 3 (the hydrated "
                                        "cache) with it", f"unset {var} before the server starts")
        if (blocked := unwritable(dest)) is not None:
            # [dev] tier3_compilation_cache.cc, EnsureTier3CacheDirExistsOnceOrDie: the runtime aborts when it
            # cannot create <root>/<platform fp>, and it writes every new compile there.
            raise DestinationError(f"tpu: {dest} is not writable ({blocked}): the TorchTPU runtime aborts when it "
                                   "cannot create its platform dir in the tier-3 root, and writes new compiles there")
        # A hydrated root is a local dir: a tier-3 read is a file read, so the runtime's backup compile (on by
        # default, raced against every read) only burns CPU at boot. With it off a miss or an unloadable entry
        # still compiles, after the read (docs/backends.md, "Backup compilation").
        return {self.env_var: str(dest), BACKUP_ENV: "0"}

    def build_command(self, job: BuildJob) -> BuildCommand:
        chip, host = job.options.get("chip"), probes.host_chip(self.env)
        if chip and host != probes.UNKNOWN and chip != host:
            raise BackendUnavailable.of(self.name, f"the build's chip is {chip} but this host is {host}: its "
                                        f"executables would be published under a {chip} fingerprint",
                                        f"build {chip} entries on a {chip} host")
        cmd = super().build_command(job)
        if cmd.argv[1:3] == ["-m", "torch.distributed.run"]:
            # Tensor parallel: the package's launch helper sets the distributed env before torchrun.
            cmd.argv[1:3] = ["-m", LAUNCH_MODULE]
        if var := probes.tier2_disabled_by(self.env):
            add_build_warning(cmd.env, f"tpu: {var}=disabled on this host would turn off tier 3: the build uses a "
                              f"private tier-2 cache instead ({cmd.env[TIER2_ENV]})")
        return cmd

    def build_env(self, job: BuildJob) -> dict[str, str]:
        # defer_and_fuse is its own entry mode; every other mode runs strict eager around its graphs.
        # A tier-2 cache of its own: a graph found in the host's shared one would never reach the build's
        # tier-3 root (build.py / launch.py remove it when the build ends).
        return {DEFER_ENV: "1" if job.spec.mode == "defer_and_fuse" else "0",
                TIER2_ENV: probes.private_tier2_name(job.roots[CACHE_ROOT])}

    # build.workers: each build is its own single-host TPU process on its own chips (libtpu's
    # multi-process variables; one port per process so their runtimes do not collide).
    device_unit: ClassVar[str] = "TPU chip"

    def build_devices(self, options: Mapping[str, str]) -> int | None:
        return probes.chip_count(options, self.env)

    def device_env(self, ids: Sequence[int]) -> dict[str, str]:
        port = 8476 + ids[0]
        chips = ",".join(map(str, ids))
        # [dev] environment.cc, InitializeSingleDeviceEnvironment: TPU_VISIBLE_DEVICES is the source of truth
        # and TPU_VISIBLE_CHIPS is rewritten from it (default "0"): a slot sets both.
        return {"TPU_VISIBLE_CHIPS": chips, "TPU_VISIBLE_DEVICES": chips, "TPU_PROCESS_BOUNDS": "1,1,1",
                "TPU_CHIPS_PER_PROCESS_BOUNDS": _CHIP_BOUNDS.get(len(ids), f"1,{len(ids)},1"),
                "TPU_PROCESS_PORT": str(port), "TPU_PROCESS_ADDRESSES": f"localhost:{port}",
                "CLOUD_TPU_TASK_ID": "0"}


_CHIP_BOUNDS = {1: "1,1,1", 2: "1,2,1", 4: "2,2,1", 8: "2,4,1"}
