"""Test helpers around the simulated device packages: a simulated host, tiny models, build runs."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from cachekeeper.backends.base import CACHE_ROOT, Backend, BuildJob, ModelRef
from cachekeeper.format.spec import EntrySpec, Shape

from . import DEFAULT_VERSIONS, REPO, make_site, pythonpath

# Env that changes what the simulated runtimes (and our fingerprints) do: cleared for every test.
DEVICE_ENV = (
    "TORCH_NEURONX_NEFF_CACHE_DIR", "TORCH_NEURONX_NEFF_LOCAL_CACHE_DIR", "TORCH_NEURONX_NEFF_DISABLE_CACHE",
    "NEURON_PLATFORM_TARGET_OVERRIDE", "NEURON_LOGICAL_NC_CONFIG", "NEURON_COMPILER_OPT_LEVEL",
    "NEURON_CC_FLAGS", "NEURON_RT_VIRTUAL_CORE_SIZE", "TORCH_NEURONX_COMPLEX_DECOMPOSE", "SIM_NEURON_TARGET",
    "NEURON_COMPILE_CACHE_URL",
    "TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT", "TORCH_TPU_TIER2_COMPILATION_CACHE", "TORCH_TPU_DEFER_AND_FUSE",
    "XLA_FLAGS", "LIBTPU_INIT_ARGS", "TORCH_TPU_INTERNAL_XLA_OPTIONS", "TPU_ACCELERATOR_TYPE",
    "TORCH_TPU_TOPOLOGY", "TORCH_TPU_SLICEBUILDER_ADDRESSES", "TPU_VISIBLE_CHIPS", "TPU_PROCESS_BOUNDS",
    "TPU_CHIPS_PER_PROCESS_BOUNDS", "TPU_PROCESS_PORT", "TPU_PROCESS_ADDRESSES", "CLOUD_TPU_TASK_ID",
    "TORCH_DEVICE_BACKEND_AUTOLOAD", "SIM_TPU_CHIP", "CACHEKEEPER_TPU_CHIP_LOCK", "CACHEKEEPER_BACKENDS",
    "TORCH_NEURONX_METRICS_ENABLED", "NEURON_LAUNCH_BLOCKING", "NEURON_RT_VISIBLE_CORES", "NKI_ENABLE_TRACE_CACHE",
    "TORCH_NEURONX_NEFF_CACHE_LOCK_TIMEOUT", "NEURON_FRAMEWORK_DEBUG", "NKI_DEBUG_INFO", "XLA_IR_DEBUG",
    "XLA_HLO_DEBUG", "TPU_VISIBLE_DEVICES", "TORCH_TPU_INTERNAL_TIER3_COMPILATION_CACHE_LOCAL_BACKUP_TASK",
    "CACHEKEEPER_BUILD_WARNINGS", "CACHEKEEPER_SERVE_CALL", "SIM_TPU_SHM", "CACHEKEEPER_TPU_TIER2_BASE",
    "WORLD_SIZE", "LOCAL_RANK", "RANK",
)


def clear_device_env(mp: pytest.MonkeyPatch) -> None:
    for name in DEVICE_ENV:
        mp.delenv(name, raising=False)


def install(mp: pytest.MonkeyPatch, site_dir: Path, **overrides: str | None) -> Path:
    """Make `site_dir` a simulated host's metadata (default versions, `overrides` by dist name with
    '_' for '-'; None removes a package) for this process and for subprocesses."""
    versions = {**DEFAULT_VERSIONS, **{k.replace("_", "-"): v for k, v in overrides.items()}}
    site = make_site(site_dir, versions)
    mp.syspath_prepend(str(site))
    mp.setenv("PYTHONPATH", pythonpath(site, packages=True))
    # The simulated host's /dev/shm/torch_tpu_cache (tier 2), as the simulation and cachekeeper both see it.
    if not os.environ.get("SIM_TPU_SHM"):
        shm = site_dir.parent / "shm-torch_tpu_cache"
        mp.setenv("SIM_TPU_SHM", str(shm))
        mp.setenv("CACHEKEEPER_TPU_TIER2_BASE", str(shm))
    return site


def tier2_dirs() -> list[str]:
    """The tier-2 caches (names) on the simulated host."""
    shm = Path(os.environ["SIM_TPU_SHM"])
    return sorted(p.name for p in shm.iterdir()) if shm.is_dir() else []


def apply_change(change: str, base: Mapping[str, str], mp: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """Apply one "site:dist=ver" | "env:VAR=value" | "option:key=value" change; returns the options to use."""
    kind, _, assignment = change.partition(":")
    name, _, value = assignment.partition("=")
    options = dict(base)
    if kind == "site":
        install(mp, tmp_path / "site2", **{name: value})
    elif kind == "env":
        mp.setenv(name, value)
    else:
        options[name] = value
    return options


def tiny_models() -> ModuleType:
    """examples/make_tiny_model.py as a module (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location("make_tiny_model", REPO / "examples" / "make_tiny_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_tiny_flux(dest: Path, shared: Path | None = None) -> ModelRef:
    """The repo's tiny Flux transformer (examples/make_tiny_model.py) saved under `dest`: copied from
    `shared` (the run's one build, the `tiny_flux_models` fixture) when given, else built here."""
    if shared is not None:
        shutil.copytree(shared / "tiny-flux", dest / "tiny-flux", dirs_exist_ok=True)
    else:
        tiny_models().make_flux(dest)
    return ModelRef("tiny-flux", "transformer", path=str(dest / "tiny-flux"), inputs="flux")


SHAPE = Shape(64, 64, 1)


def entry(backend: str, mode: str, *, tp: int = 1, shape: Shape = SHAPE) -> EntrySpec:
    options = (("tp", str(tp)),) if tp > 1 else ()
    return EntrySpec("tiny-flux", "transformer", backend, mode, shape, "float32", options=options)


# Warm-up at a short prompt: same graph structure as the default 512 tokens, faster on 2 cores.
WARMUP_OPTIONS = {"text_len": "8"}


def run_build(backend: Backend, spec: EntrySpec, model: ModelRef, workdir: Path, *,
              options: Mapping[str, str] = WARMUP_OPTIONS, seed_from: Path | None = None,
              timeout: float = 600, env: Mapping[str, str] | None = None, strict: bool = False) -> dict[str, Any]:
    """Run the backend's real build command in a subprocess; `seed_from` pre-fills the cache root
    (a hydrated dir); `env` is added to the command's, as the worker adds a build.workers slot's; `strict`:
    replayed as the canary does (`python -m cachekeeper.runtime.replay`, CACHEKEEPER_STRICT=fail), so a
    compile is an error. Returns the result JSON the build wrote."""
    roots = backend.build_roots(workdir)
    for root in roots.values():
        root.mkdir(parents=True, exist_ok=True)
    if seed_from is not None:
        shutil.copytree(seed_from, roots[CACHE_ROOT], dirs_exist_ok=True)
    job = BuildJob(spec, model, {k: str(v) for k, v in roots.items()}, dict(options),
                   result_path=str(workdir / "result.json"))
    cmd = backend.build_command(job)
    cmd.env.update(env or {})
    argv = cmd.argv
    if strict:
        from cachekeeper.admin.canary import replay_command

        argv = replay_command(cmd.argv)
        cmd.env["CACHEKEEPER_STRICT"] = "fail"
    proc = subprocess.run(argv, env=cmd.env, cwd=workdir, capture_output=True, text=True, timeout=timeout,
                          check=False)
    assert proc.returncode == 0, f"build failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    result: dict[str, Any] = json.loads((workdir / "result.json").read_text())
    return result


def publish_and_hydrate(backend: Backend, options: Mapping[str, str], spec: EntrySpec, built: Path,
                        dest: Path) -> list[str]:
    """Publish the build in workdir `built` to a fresh in-memory store, hydrate it into `dest` as a boot
    hook would (the real publish and hydrate code); returns the published paths."""
    from cachekeeper.config.hydrate import HydrateOptions
    from cachekeeper.hydration.engine import Target, hydrate
    from cachekeeper.publish.upload import publish
    from cachekeeper.stores.memory import MemoryStore

    store = MemoryStore()
    fp = backend.fingerprint(options)
    roots = backend.build_roots(built)  # also shows `include` the files it judges
    result = publish(store, fingerprint=fp, spec=spec, roots=roots, include=backend.include)
    hydrate(Target(fp, dest), HydrateOptions(), lambda: store)
    return sorted(f.path for f in result.manifest.files)


def files_under(root: Path) -> list[str]:
    """Files below `root`, without the state dir hydrate keeps there."""
    return sorted(rel for p in root.rglob("*") if p.is_file()
                  and not (rel := p.relative_to(root).as_posix()).startswith(".cachekeeper/"))
