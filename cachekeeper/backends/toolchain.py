"""Host side of the backends: toolchain versions, version pins, fingerprint fields, build-command assembly.

Light: the hydrate path and `doctor` import it through every backend class, so it reads versions from
`importlib.metadata` and knobs from the env and never imports torch or diffusers. What a build
subprocess does on the device (load, compile, warm up, count) is the other side, `build_main.py`.

Two bases build on `Backend` (base.py, the public plugin contract):
  * `PackagedBackend`: the runtime is a set of pip distributions. Their versions are fingerprint fields,
    the config may pin them (or any other distribution), and a missing one makes the backend unusable.
  * `DeviceBackend`: a torch device package (torch-neuronx, torch_tpu). What differs between them is data,
    a `DeviceToolchain`, consumed by one `build_command` here and one build in `build_main.py`.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from .. import settings
from ..errors import BackendUnavailable, ConfigError
from ..format.fingerprint import Fingerprint
from .base import CACHE_ROOT, Backend, BuildCommand, BuildJob

# Options that are not toolchain knobs: where/what, not how it compiles. `cores` / `chips`: how many
# devices build.workers may split on this host (a host property, never part of the fingerprint).
LOCATION_OPTIONS = frozenset({"device", "import_from", "cores", "chips"})
PIN_SUFFIX = "_version"

# --- versions and pins -------------------------------------------------------------------------------


def dist_version(name: str) -> str | None:
    """Installed version of a distribution, or None; reads metadata only (no import of the package)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def installed_versions(dists: tuple[str, ...]) -> dict[str, str | None]:
    return {d: dist_version(d) for d in dists}


def _not_installed(versions: Mapping[str, str | None]) -> str | None:
    missing = [d for d, v in versions.items() if v is None]
    if not missing:
        return None
    return f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed"


def missing_reason(versions: Mapping[str, str | None], hint: str) -> str | None:
    """'torch-neuronx is not installed (pip install ...)', or None when all are present."""
    what = _not_installed(versions)
    return f"{what} ({hint})" if what else None


def require_versions(backend: str, dists: tuple[str, ...], hint: str) -> dict[str, str]:
    versions = installed_versions(dists)
    if what := _not_installed(versions):
        raise BackendUnavailable.of(backend, what, hint)
    return {d: v for d, v in versions.items() if v is not None}


def pin_option(dist: str) -> str:
    """The config option that pins a distribution: torch-neuronx -> torch_neuronx_version."""
    return re.sub(r"[-.]", "_", dist.lower()) + PIN_SUFFIX


def pin_matches(pin: str, installed: str) -> bool:
    # "2.22" pins every 2.22.x; "2.22.1.0" pins exactly that build.
    return installed == pin or installed.startswith(pin + ".") or installed.startswith(pin + "+")


def check_pins(backend: str, options: Mapping[str, str], versions: Mapping[str, str | None]) -> None:
    """A config that pins a version this host does not have is refused: its artifacts would be for another
    toolchain than the config promises."""
    for dist, installed in versions.items():
        pin = options.get(pin_option(dist))
        if pin is None:
            continue
        if installed is None:
            raise BackendUnavailable.of(backend, f"config pins {dist} {pin} but it is not installed")
        if not pin_matches(pin, installed):
            raise BackendUnavailable.of(backend, f"config pins {dist} {pin} but {installed} is installed",
                                        f"install {dist}=={pin} or change {pin_option(dist)} in the config")


def is_pin(option: str) -> bool:
    return option.endswith(PIN_SUFFIX)


def pinned_versions(options: Mapping[str, str]) -> dict[str, str | None]:
    """Installed versions of every distribution the options pin (`torch_version`, `diffusers_version`,
    `pytorch_triton_version`), by the name `pin_option` maps back to the option; None if not installed."""
    out: dict[str, str | None] = {}
    for option in filter(is_pin, options):
        base = option.removesuffix(PIN_SUFFIX)
        names = (base, base.replace("_", "-"), base.replace("_", "."))
        found = next(((n, v) for n in names if (v := dist_version(n)) is not None), None)
        name, version = found if found else (names[1], None)
        out[name] = version
    return out


# --- env knobs and fingerprint fields ----------------------------------------------------------------


def normalize_flags(value: str) -> str:
    """Whitespace-insensitive form of a flags string (order kept: later flags override earlier ones)."""
    return " ".join(value.split())


def env_fields(env: Mapping[str, str], names: tuple[str, ...]) -> dict[str, str]:
    """`env.NAME` fingerprint fields; unset and empty are the same (both mean the runtime default)."""
    return {f"env.{n}": normalize_flags(env.get(n, "")) for n in names}


def option_fields(options: Mapping[str, str], known: frozenset[str]) -> dict[str, str]:
    """Options no field covers (e.g. warm-up `text_len`) may change the graph: keep them as `option.*`."""
    return {f"option.{k}": v for k, v in sorted(options.items())
            if k not in known and k not in LOCATION_OPTIONS and not is_pin(k)}


def choose(options: Mapping[str, str], option: str, env: Mapping[str, str], var: str, default: str) -> str:
    """Config option, else the env var the runtime reads, else the runtime's default."""
    return options.get(option) or env.get(var) or default


def require_choice(backend: str, option: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(f"{backend}: {option} must be one of {', '.join(allowed)}, not {value!r}")
    return value


def unwritable(dest: Path) -> str | None:
    """Why a runtime could not create dirs in `dest` (or in the nearest existing dir above it, where hydrate
    will create it), or None. Tried for real: mode bits do not bind root, a read-only mount does."""
    here = dest
    while not here.exists():
        if here.parent == here:
            return "no existing dir above it"
        here = here.parent
    if not here.is_dir():
        return f"{here} is not a directory"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".ck-writable-", dir=here))
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def non_empty(path: Path) -> bool:
    """Runtimes treat an empty cache file as a miss, so it is not worth shipping."""
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


# --- build commands ----------------------------------------------------------------------------------


def tp_degree(job: BuildJob) -> int:
    """Tensor-parallel degree: the entry's `tp` option (part of its key), else the model's setting."""
    raw = dict(job.spec.options).get("tp") or str(job.model.tensor_parallel)
    try:
        n = int(raw)
    except ValueError:
        raise ConfigError(f"{job.spec.label()}: tp must be an integer, not {raw!r}") from None
    if n < 1:
        raise ConfigError(f"{job.spec.label()}: tp must be >= 1, not {n}")
    return n


TORCHRUN_LOGS = "torchrun-logs"   # in the build's workdir, beside its roots


def module_command(module: str, job: BuildJob, env: Mapping[str, str]) -> BuildCommand:
    """`python -m module JOB`, or N ranks of it under torchrun when the entry is tensor parallel."""
    n = tp_degree(job)
    cmd = Backend.python_module_command(module, job, env)
    if n == 1:
        return cmd
    # --standalone: a private rendezvous on a free local port, so parallel builds never collide.
    # --log-dir: torchrun's per-run dir goes in the build's workdir (removed with it), not a
    # `torchelastic_*` mkdtemp in $TMPDIR that nothing removes (torch/distributed/elastic/multiprocessing/api.py).
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}",
            f"--log-dir={cache_workdir(job) / TORCHRUN_LOGS}", "-m", module, job.to_json()]
    return BuildCommand(argv, cmd.env)


def cache_workdir(job: BuildJob) -> Path:
    """The build's workdir: the parent of its cache root (Backend.build_roots puts roots there)."""
    return Path(job.roots[CACHE_ROOT]).parent


# --- the shared bases --------------------------------------------------------------------------------


class PackagedBackend(Backend):
    """A backend whose runtime is a set of pip distributions: their versions are fingerprint fields,
    the config may pin them, and a missing one makes the backend unusable (with an install hint)."""

    dists: ClassVar[tuple[str, ...]]
    install_hint: ClassVar[str]
    field_options: ClassVar[frozenset[str]] = frozenset()   # options that are fields of their own

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._env = env  # tests pass one; real use reads the process env at call time

    @property
    def env(self) -> Mapping[str, str]:
        return os.environ if self._env is None else self._env

    def unavailable_reason(self, options: Mapping[str, str] | None = None) -> str | None:
        return missing_reason(installed_versions(self.dists), self.install_hint)

    def check_pins(self, options: Mapping[str, str]) -> None:
        """Pins of the backend's own distributions, and of any other one the config pins (`diffusers_version`):
        a pin is a promise about the toolchain, whichever distribution it names."""
        versions = installed_versions(self.dists)
        own = {pin_option(d) for d in versions}
        versions.update(pinned_versions({k: v for k, v in options.items() if k not in own}))
        check_pins(self.name, options, versions)

    def versions(self, options: Mapping[str, str]) -> dict[str, str]:
        """Installed versions by distribution, after checking presence and the config's pins."""
        versions = require_versions(self.name, self.dists, self.install_hint)
        self.check_pins(options)
        return versions

    def version_fields(self, options: Mapping[str, str]) -> dict[str, str]:
        """The distributions' versions as fingerprint fields (torch-neuronx -> torch_neuronx)."""
        return {d.replace("-", "_"): v for d, v in self.versions(options).items()}

    def option_fields(self, options: Mapping[str, str]) -> dict[str, str]:
        return option_fields(options, self.field_options)


@dataclass(frozen=True)
class DeviceToolchain:
    """What tells one torch device backend from another: the data `DeviceBackend.build_command` and
    `build_main.device_build` consume."""

    package: str                          # the device package a build imports: torch_neuronx, torch_tpu
    device: str                           # its torch device ("neuron"); a simulation substitutes "cpu"
    compile_backend: str                  # torch.compile backend name
    dist_backend: str                     # init_process_group backend name (tensor parallel)
    eager_modes: tuple[str, ...]          # modes in which ops compile as they first run (no torch.compile)
    build_module: str                     # `python -m` target: the package's build.py
    artifact: re.Pattern[str]             # relpaths in the cache root the runtime reads (not its temps)
    # option -> (env var the runtime reads, default when neither is set): one fingerprint field each, and
    # exported to builds when the config sets it.
    knobs: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    other_env: tuple[str, ...] = ()       # other output-changing env vars: `env.*` fields
    # Host settings that turn the cache off, var -> the value that does (None: any); a build drops them.
    cache_off: Mapping[str, str | None] = field(default_factory=dict)
    # The package's `torch.backends` entry point (what torch's autoload calls), run by the build after the
    # import: builds keep autoload off so that only this package loads. None: importing it is enough.
    entry_point: str | None = None
    # The runtime's own counters, name -> "module:function" returning an int ("compiled", "loaded", ...).
    counters: Mapping[str, str] = field(default_factory=dict)
    # Host settings that change artifact bytes without changing the runtime's key, var -> why: a build
    # drops them, with one warning (a build must write what a server with the default would compile).
    dropped_env: Mapping[str, str] = field(default_factory=dict)


class DeviceBackend(PackagedBackend):
    """A torch device package's compile cache (one `cache` root): the generic fingerprint, `include` and
    `build_command`. A subclass names its `toolchain` and adds its own fields and build env."""

    toolchain: ClassVar[DeviceToolchain]

    def toolchain_fields(self, options: Mapping[str, str]) -> dict[str, str]:
        """Fields beyond versions, knobs and env (a probed target, a chip): none by default."""
        return {}

    def knob_fields(self, options: Mapping[str, str]) -> dict[str, str]:
        return {k: normalize_flags(choose(options, k, self.env, var, default))
                for k, (var, default) in self.toolchain.knobs.items()}

    def fingerprint(self, options: Mapping[str, str]) -> Fingerprint:
        fields = self.version_fields(options)
        fields.update(self.knob_fields(options))
        fields.update(self.toolchain_fields(options))
        fields.update(env_fields(self.env, self.toolchain.other_env))
        fields.update(option_fields(options, self.field_options | frozenset(self.toolchain.knobs)))
        fp = Fingerprint.of(self.name, fields)
        # What `env_exports` re-exports: the boot path computes the fingerprint, then asks for the env.
        self._fingerprint = fp
        return fp

    def last_fingerprint(self) -> Fingerprint:
        """The fingerprint this instance computed last (hydrate computes it before `env_exports`), else the
        host's with no options."""
        fp: Fingerprint | None = getattr(self, "_fingerprint", None)
        return fp if fp is not None else self.fingerprint({})

    def include(self, root: str, relpath: str, path: Path) -> bool:
        # Only the runtime's entries at their own path (never its temps); an empty one is a miss to it.
        return root == CACHE_ROOT and self.toolchain.artifact.fullmatch(relpath) is not None and non_empty(path)

    def build_env(self, job: BuildJob) -> dict[str, str]:
        """Env a build adds for this backend (beyond the cache root and the knobs the config sets)."""
        return {}

    # build side (called in the build subprocess, around the device package's import) ----------------

    def rank_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """Env to set in a build process before the device package is imported (one rank's devices)."""
        return {}

    def runtime_facts(self, job: BuildJob) -> dict[str, Any]:
        """What the loaded runtime says about its own key, recorded in the build result; raises when it
        contradicts the fingerprint the build will be published under."""
        return {}

    def build_command(self, job: BuildJob) -> BuildCommand:
        self.versions(job.options)
        tc = self.toolchain
        env = {
            self.env_var: job.roots[CACHE_ROOT],
            # The build imports the device package explicitly (build_main) rather than through autoload:
            # one device package per build, whatever else is installed.
            "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
            **self.build_env(job),
        }
        env.update({var: job.options[k] for k, (var, _) in tc.knobs.items() if job.options.get(k)})
        cmd = module_command(tc.build_module, job, env)
        # A build exists to fill the cache: drop a host setting that turns it off.
        for var, value in tc.cache_off.items():
            if var in cmd.env and value in (None, cmd.env[var]):
                del cmd.env[var]
        dropped = [var for var in tc.dropped_env if var in cmd.env]
        for var in dropped:
            del cmd.env[var]
        if dropped:
            why = "; ".join(dict.fromkeys(tc.dropped_env[v] for v in dropped))
            add_build_warning(cmd.env, f"{self.name}: the build drops {', '.join(dropped)} ({why})")
        return cmd


def add_build_warning(env: dict[str, str], line: str) -> None:
    """Queue one warning line for the build subprocess to print (settings.BUILD_WARNINGS): build_main prints
    each as one `cachekeeper-build: warning:` line, so they land in the build log the worker keeps."""
    var = settings.BUILD_WARNINGS.name
    env[var] = "\n".join(filter(None, [env.get(var, ""), line]))
