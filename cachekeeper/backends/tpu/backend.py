"""TorchTPU's tier-3 compilation cache: what its key misses, which files are artifacts, how a build runs.

Tier 3 lives under TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT as `<16 hex platform fingerprint>/<k1>_<k2>_<k3>.bin`
(older releases: two key parts). The platform fingerprint covers a cache-format constant and the PjRt
platform version; the key covers graph, dimensions and compile options. Neither covers the chip generation,
the topology, LIBTPU_INIT_ARGS or the torch_tpu wheel version: our fingerprint adds them.
Tier 3 works only while tier 2 (shared memory) is on: TORCH_TPU_TIER2_COMPILATION_CACHE=disabled turns
both off without a word, so builds unset it and boot hooks refuse it.

Fingerprint fields:
  torch, torch_tpu, libtpu   versions from importlib.metadata
  pjrt_platform      option `pjrt_platform_version`, else libtpu.so's sha256 from libtpu's RECORD (the
                     binary that reports the platform version; read without loading it)
  chip               option `chip`, else ACCELERATOR_TYPE / TPU_ACCELERATOR_TYPE ("v6e-8" -> v6e)
  topology           option `topology`, else TPU_TOPOLOGY / TORCH_TPU_TOPOLOGY, else the accelerator type
  xla_flags          option, else XLA_FLAGS;  libtpu_init_args  option, else LIBTPU_INIT_ARGS
  env.TORCH_TPU_INTERNAL_XLA_OPTIONS; option.* for any other option (it may change the graph)
Pins (`torch_version`, `torch_tpu_version`, `libtpu_version`) are checked, not recorded.
"""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from ...errors import BackendUnavailable
from ...fingerprint import Fingerprint
from .. import MODES
from .._common import (
    PackagedBackend,
    choose,
    env_fields,
    module_command,
    non_empty,
    normalize_flags,
    option_fields,
    require_choice,
)
from ..base import CACHE_ROOT, BuildCommand, BuildJob

BUILD_MODULE = "cachekeeper.backends.tpu.build"
DISTS = ("torch", "torch-tpu", "libtpu")
INSTALL_HINT = "pip install torch_tpu libtpu from TorchTPU's release channel"
CHIPS = ("v6e", "v7x")
UNKNOWN = "unknown"
TIER2_ENV = "TORCH_TPU_TIER2_COMPILATION_CACHE"
TIER2_INTERNAL_ENV = "TORCH_TPU_INTERNAL_TIER2_COMPILATION_CACHE"
DEFER_ENV = "TORCH_TPU_DEFER_AND_FUSE"
ACCELERATOR_ENVS = ("ACCELERATOR_TYPE", "TPU_ACCELERATOR_TYPE")
TOPOLOGY_ENVS = ("TPU_TOPOLOGY", "TORCH_TPU_TOPOLOGY")

# option -> (env var the runtime reads, default); each is one fingerprint field.
KNOBS: dict[str, tuple[str, str]] = {
    "xla_flags": ("XLA_FLAGS", ""),
    "libtpu_init_args": ("LIBTPU_INIT_ARGS", ""),
}
OTHER_ENV = ("TORCH_TPU_INTERNAL_XLA_OPTIONS",)
FIELD_OPTIONS = frozenset({*KNOBS, "chip", "topology", "pjrt_platform_version"})

_ENTRY = re.compile(r"[0-9a-f]{16}/[0-9a-f]{16}(_[0-9a-f]{16}){1,2}\.bin")
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


class TPUBackend(PackagedBackend):
    dists: ClassVar[tuple[str, ...]] = DISTS
    install_hint: ClassVar[str] = INSTALL_HINT
    name: ClassVar[str] = "tpu"
    env_var: ClassVar[str] = "TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT"
    modes: ClassVar[tuple[str, ...]] = MODES["tpu"]
    default_cache_dir: ClassVar[str | None] = None  # unset: tier 3 is off

    def fingerprint(self, options: Mapping[str, str]) -> Fingerprint:
        versions = self.versions(options)
        env = self.env
        chip = options.get("chip") or chip_of(accelerator_type(env))
        if "chip" in options:
            require_choice(self.name, "chip", chip, CHIPS)
        fields: dict[str, str] = {d.replace("-", "_"): v for d, v in versions.items()}
        fields.update({
            "pjrt_platform": options.get("pjrt_platform_version") or libtpu_binary_id(),
            "chip": chip,
            "topology": topology(options, env),
        })
        fields.update({k: normalize_flags(choose(options, k, env, var, d)) for k, (var, d) in KNOBS.items()})
        fields.update(env_fields(env, OTHER_ENV))
        fields.update(option_fields(options, FIELD_OPTIONS))
        return Fingerprint.of(self.name, fields)

    def env_warnings(self, options: Mapping[str, str]) -> list[str]:
        env, out = self.env, []
        if var := tier2_disabled_by(env):
            out.append(f"{var}=disabled turns off tier 2 and with it tier 3: hydrated artifacts are never read")
        root = env.get(self.env_var, "")
        if root.startswith("gs://"):
            out.append(f"{self.env_var}={root}: hydrate fills a local dir; point the runtime at it instead")
        if env.get(DEFER_ENV, env.get("TPU_DEFER_AND_FUSE")) == "1":
            out.append(f"{DEFER_ENV}=1: eager runs defer and fuse, so only defer_and_fuse entries are used")
        if "chip" not in options and chip_of(accelerator_type(env)) == UNKNOWN:
            out.append("chip unknown (ACCELERATOR_TYPE unset): set backend_options.tpu.chip (v6e|v7x)")
        return out

    def env_exports(self, dest: Path) -> dict[str, str]:
        if var := tier2_disabled_by(self.env):
            raise BackendUnavailable(f"tpu: {var}=disabled turns off tier 2, and tier 3 (the hydrated cache) with it",
                                     f"unset {var} before the server starts")
        return {self.env_var: str(dest)}

    def include(self, root: str, relpath: str, path: Path) -> bool:
        # Entries only: the runtime's temps are `<entry>.bin.<host>-<tid>-<pid>-<us>.<n>.tmp`.
        return root == CACHE_ROOT and _ENTRY.fullmatch(relpath) is not None and non_empty(path)

    def build_command(self, job: BuildJob) -> BuildCommand:
        self.versions(job.options)
        env = {
            self.env_var: job.roots[CACHE_ROOT],
            # defer_and_fuse is its own entry mode; every other mode runs strict eager around its graphs.
            DEFER_ENV: "1" if job.spec.mode == "defer_and_fuse" else "0",
            "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
        }
        env.update({var: job.options[k] for k, (var, _) in KNOBS.items() if job.options.get(k)})
        cmd = module_command(BUILD_MODULE, job, env)
        # A build must write tier 3, which needs tier 2: drop a host setting that disables it.
        for var in (TIER2_ENV, TIER2_INTERNAL_ENV):
            if cmd.env.get(var) == "disabled":
                del cmd.env[var]
        return cmd

    # build.workers: each build is its own single-host TPU process on its own chips (libtpu's
    # multi-process variables; one port per process so their runtimes do not collide).
    device_unit: ClassVar[str] = "TPU chip"

    def build_devices(self, options: Mapping[str, str]) -> int | None:
        if options.get("chips"):
            return int(options["chips"])
        visible = self.env.get("TPU_VISIBLE_CHIPS", "")
        if visible:
            return len(visible.split(","))
        return len(list(Path("/dev").glob("accel[0-9]*"))) or len(list(Path("/dev/vfio").glob("[0-9]*")))

    def device_env(self, ids: Sequence[int]) -> dict[str, str]:
        port = 8476 + ids[0]
        return {"TPU_VISIBLE_CHIPS": ",".join(map(str, ids)), "TPU_PROCESS_BOUNDS": "1,1,1",
                "TPU_CHIPS_PER_PROCESS_BOUNDS": _CHIP_BOUNDS.get(len(ids), f"1,{len(ids)},1"),
                "TPU_PROCESS_PORT": str(port), "TPU_PROCESS_ADDRESSES": f"localhost:{port}",
                "CLOUD_TPU_TASK_ID": "0"}


_CHIP_BOUNDS = {1: "1,1,1", 2: "1,2,1", 4: "2,2,1", 8: "2,4,1"}
