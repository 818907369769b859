"""Helpers shared by the backends: device backends (neuron, tpu, neuron_xla) and, for its build
subprocess, inductor.

Two halves with different import budgets:
  * light (top of the file): versions from `importlib.metadata`, env knobs, version pins, root-aware
    `include`, build-command assembly. The hydrate path and `doctor` use these; they never import torch.
  * build (bottom): what a build subprocess does on the device (load the component, tensor parallel,
    compile in the entry's mode, warm up, count compiles). torch and diffusers are imported inside the
    functions only.

Simulated device packages (tests/simulated/) stand in for torch-neuronx and torch_tpu on hosts without
the hardware. CPU torch has no "neuron" or "tpu" device, so a simulated package exposes a `SIMULATION`
object naming the device it really runs on and its compile counters; `device_runtime` is the one place
that reads it. Real packages have no such attribute and get the real device string.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import re
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import BackendUnavailable, BuildFailed, ConfigError
from .base import CACHE_ROOT, Backend, BuildCommand, BuildJob, ModelRef

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

# --- light: versions and pins ------------------------------------------------------------------------

# Options that are not toolchain knobs: where/what, not how it compiles. `cores` / `chips`: how many
# devices build.workers may split on this host (a host property, never part of the fingerprint).
LOCATION_OPTIONS = frozenset({"device", "import_from", "cores", "chips"})
PIN_SUFFIX = "_version"


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
        raise BackendUnavailable(f"{backend}: {what}", hint)
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
            raise BackendUnavailable(f"{backend}: config pins {dist} {pin} but it is not installed")
        if not pin_matches(pin, installed):
            raise BackendUnavailable(f"{backend}: config pins {dist} {pin} but {installed} is installed",
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


# --- light: env knobs --------------------------------------------------------------------------------


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


# --- light: roots ------------------------------------------------------------------------------------


class PackagedBackend(Backend):
    """A backend whose runtime is a set of pip distributions: their versions are fingerprint fields,
    the config may pin them, and a missing one makes the backend unusable (with an install hint)."""

    dists: ClassVar[tuple[str, ...]]
    install_hint: ClassVar[str]

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._env = env  # tests pass one; real use reads the process env at call time

    @property
    def env(self) -> Mapping[str, str]:
        return os.environ if self._env is None else self._env

    def unavailable_reason(self, options: Mapping[str, str] | None = None) -> str | None:
        return missing_reason(installed_versions(self.dists), self.install_hint)

    def check_pins(self, options: Mapping[str, str]) -> None:
        check_pins(self.name, options, installed_versions(self.dists))

    def versions(self, options: Mapping[str, str]) -> dict[str, str]:
        """Installed versions by distribution, after checking presence and the config's pins."""
        versions = require_versions(self.name, self.dists, self.install_hint)
        self.check_pins(options)
        return versions


def non_empty(path: Path) -> bool:
    """Runtimes treat an empty cache file as a miss, so it is not worth shipping."""
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


# --- light: build commands ---------------------------------------------------------------------------


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


def module_command(module: str, job: BuildJob, env: Mapping[str, str]) -> BuildCommand:
    """`python -m module JOB`, or N ranks of it under torchrun when the entry is tensor parallel."""
    n = tp_degree(job)
    cmd = Backend.python_module_command(module, job, env)
    if n == 1:
        return cmd
    # --standalone: a private rendezvous on a free local port, so parallel builds never collide.
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}",
            "-m", module, job.to_json()]
    return BuildCommand(argv, cmd.env)


def cache_workdir(job: BuildJob) -> Path:
    """The build's workdir: the parent of its cache root (Backend.build_roots puts roots there)."""
    return Path(job.roots[CACHE_ROOT]).parent


# --- build subprocess (imports torch lazily) ---------------------------------------------------------

FULL = "full"
REPEATED_BLOCKS = "repeated_blocks"


@dataclass(frozen=True)
class DeviceRuntime:
    """What a build needs from a device package."""

    package: str                                   # "torch_neuronx", "torch_tpu"
    device: str                                    # "neuron" / "tpu"; a simulation substitutes "cpu"
    compile_backend: str                           # torch.compile backend name
    dist_backend: str                              # init_process_group backend name
    eager: Callable[[], AbstractContextManager[Any]]   # op-by-op mode; a no-op on real hardware
    stats: Callable[[], dict[str, int]] | None     # runtime compile counters, None if it has none
    simulated: bool


def device_runtime(module: Any, *, device: str, compile_backend: str, dist_backend: str) -> DeviceRuntime:
    """The runtime of an imported device package. Only simulated packages define `SIMULATION`."""
    sim = getattr(module, "SIMULATION", None)
    if sim is None:
        return DeviceRuntime(module.__name__, device, compile_backend, dist_backend, contextlib.nullcontext,
                             None, simulated=False)
    return DeviceRuntime(module.__name__, sim.device, compile_backend, dist_backend, sim.eager_mode,
                         sim.stats, simulated=True)


def import_device_package(name: str, backend: str, hint: str) -> Any:
    """Import the device package explicitly (builds run with TORCH_DEVICE_BACKEND_AUTOLOAD=0)."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise BackendUnavailable(f"{backend}: cannot import {name}: {exc}", hint) from None


def torch_dtype(name: str) -> Any:
    import torch

    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise BuildFailed(f"unknown dtype {name!r}")
    return dt


def load_component(ref: ModelRef, dtype: str) -> Any:
    """The component on CPU (tensor parallel shards it there before it moves to the device)."""
    from diffusers import AutoModel

    auto: Any = AutoModel  # diffusers is untyped
    kwargs: dict[str, Any] = {"torch_dtype": torch_dtype(dtype)}
    if ref.path:
        source: str = ref.path
        component_dir = Path(ref.path) / ref.component
        kwargs["subfolder"] = ref.component if component_dir.is_dir() else None
    elif ref.hub:
        source = ref.hub
        kwargs["subfolder"] = ref.component
        if ref.revision:
            kwargs["revision"] = ref.revision
    else:
        raise BuildFailed(f"{ref.name}: the model has neither a path nor a hub id")
    try:
        model = auto.from_pretrained(source, **kwargs)
    except (OSError, ValueError) as exc:
        raise BuildFailed(f"{ref.name}: cannot load {ref.component} from {source}: {exc}") from None
    return model.eval().requires_grad_(False)


def component_and_inputs(job: BuildJob, device: str) -> tuple[Any, dict[str, Any]]:
    """The component on CPU and its warm-up keyword arguments on `device`: captured from one pipeline call
    when the model is a pipeline (and `inputs` is auto), else from the family's input builder (a component
    shipped without its pipeline)."""
    from ..pipeline_warmup import captured_component, has_pipeline, to_device
    from ..warmup import build_inputs

    ref = job.model
    if ref.inputs == "auto" and has_pipeline(ref):
        model, inputs = captured_component(ref, job.spec, torch_dtype(job.spec.dtype))
        return model, to_device(inputs, device)
    model = load_component(ref, job.spec.dtype)
    options = dict(job.options)
    if ref.max_sequence_length:
        options["text_len"] = str(ref.max_sequence_length)
    return model, build_inputs(model, ref, job.spec.shape, job.spec.dtype, device, options)


def world() -> tuple[int, int]:
    """(rank, world size) as torchrun sets them; (0, 1) when run directly."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def init_tensor_parallel(rt: DeviceRuntime, model: Any) -> None:
    """Shard the model over all ranks with diffusers' TensorParallelConfig on a device mesh."""
    import torch.distributed as dist
    from diffusers import TensorParallelConfig
    from torch.distributed.device_mesh import DeviceMesh

    tp_config: Any = TensorParallelConfig  # diffusers is untyped

    dist.init_process_group(backend=rt.dist_backend)
    mesh = DeviceMesh(rt.device, list(range(dist.get_world_size())))
    model.enable_parallelism(config=tp_config(mesh=mesh))


def compile_for_mode(model: Any, mode: str, rt: DeviceRuntime, eager_modes: tuple[str, ...]) -> None:
    """Compile the way a server does, or not at all for eager modes (ops compile as they run)."""
    kwargs = {"backend": rt.compile_backend, "fullgraph": True, "dynamic": False}
    if mode == FULL:
        model.compile(**kwargs)
    elif mode == REPEATED_BLOCKS:
        model.compile_repeated_blocks(**kwargs)
    elif mode not in eager_modes:
        raise BuildFailed(f"{rt.package}: unknown mode {mode!r}")


def count_files(root: Path, pattern: Callable[[str, Path], bool]) -> int:
    if not root.is_dir():
        return 0
    return sum(1 for p in root.rglob("*") if p.is_file() and pattern(p.relative_to(root).as_posix(), p))


def gather_stats(rt: DeviceRuntime) -> dict[str, int] | None:
    """The runtime's counters summed over all ranks (every rank compiles or loads its own graphs)."""
    if rt.stats is None:
        return None
    mine = rt.stats()
    _, size = world()
    if size == 1:
        return mine
    import torch.distributed as dist

    parts: list[dict[str, int] | None] = [None] * size
    dist.all_gather_object(parts, mine)
    total: dict[str, int] = {}
    for part in parts:
        for k, v in (part or {}).items():
            total[k] = total.get(k, 0) + v
    return total


def prepare_call(job: BuildJob, rt: DeviceRuntime, eager_modes: tuple[str, ...], *,
                 tensor_parallel: bool) -> Callable[[], Any]:
    """Load, shard, place and compile as the server does; returns the warm-up call: the whole pipeline
    (`warmup: pipeline`) or the component on its captured (or built) inputs."""
    from ..pipeline_warmup import call_kwargs, check_size, component_of, load_pipeline, place, warmup_kind

    if warmup_kind(job.spec) == "pipeline":
        pipe = load_pipeline(job.model, torch_dtype(job.spec.dtype))
        model = component_of(pipe, job.model)
        check_size(job.model, job.spec, pipe, model)
        if tensor_parallel:
            init_tensor_parallel(rt, model)
        place(pipe, job.model, rt.device)
        compile_for_mode(model, job.spec.mode, rt, eager_modes)
        kwargs = call_kwargs(pipe, job.spec, job.model)
        return lambda: pipe(**kwargs)
    model, inputs = component_and_inputs(job, rt.device)
    if tensor_parallel:
        init_tensor_parallel(rt, model)
    model.to(rt.device)
    compile_for_mode(model, job.spec.mode, rt, eager_modes)
    return lambda: model(**inputs)


def run_build(job: BuildJob, rt: DeviceRuntime, *, eager_modes: tuple[str, ...],
              is_artifact: Callable[[str, Path], bool]) -> dict[str, Any]:
    """Load, (shard), place, compile, warm up once at the entry's shape; return the result record."""
    import torch

    t0 = time.perf_counter()
    cache = Path(job.roots[CACHE_ROOT])
    before = count_files(cache, is_artifact)
    rank, size = world()
    call = prepare_call(job, rt, eager_modes, tensor_parallel=size > 1)
    t1 = time.perf_counter()
    eager = rt.eager() if job.spec.mode in eager_modes else contextlib.nullcontext()
    with torch.no_grad(), eager:
        call()
    first_call = time.perf_counter() - t1
    stats = gather_stats(rt)
    after = count_files(cache, is_artifact)
    counters: dict[str, int | None]
    if stats is not None:
        counters = {"compiled": stats.get("compiled", 0), "loaded": stats.get("loaded", 0), **stats}
    else:
        # No runtime counters: new artifacts in a dir that started empty or hydrated are compiles.
        counters = {"compiled": after - before, "loaded": None}
    return {
        "ok": True, "entry": job.spec.key, "backend": job.spec.backend, "mode": job.spec.mode,
        "package": rt.package, "device": rt.device, "simulated": rt.simulated, "rank": rank,
        "world_size": size, "counters": counters,
        "counters_source": "runtime" if stats is not None else "cache-dir diff",
        "artifacts": after,
        "timings": {"first_call_s": round(first_call, 3), "total_s": round(time.perf_counter() - t0, 3)},
    }


def write_result(path: str, result: Mapping[str, Any]) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(result, indent=1, sort_keys=True))


def build_main(argv: list[str], prog: str, build: Callable[[BuildJob], dict[str, Any]]) -> int:
    """The entry point of a build module: one `cachekeeper-build: error:` line and exit 1 on failure."""
    from ..errors import CachekeeperError

    if len(argv) != 1:
        print(f"usage: python -m {prog} '<job json>'", file=sys.stderr)
        return 2
    try:
        job = BuildJob.from_json(argv[0])
    except (ValueError, KeyError, TypeError) as exc:
        print(f"cachekeeper-build: error: bad job JSON: {exc}", file=sys.stderr)
        return 2
    try:
        result = build(job)
    except CachekeeperError as exc:
        print(f"cachekeeper-build: error: {exc.message}", file=sys.stderr)
        if "hint" in vars(exc):  # its own next step, not the class default meant for the CLI
            print(f"cachekeeper-build: hint: {exc.hint}", file=sys.stderr)
        return 1
    except Exception as exc:
        import traceback

        traceback.print_exc()
        print(f"cachekeeper-build: error: {job.spec.label()}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        _close_process_group()
    if result.get("rank", 0) == 0:
        write_result(job.result_path, result)
        print(json.dumps({"counters": result.get("counters")}))
    return 0


def _close_process_group() -> None:
    if "torch.distributed" not in sys.modules:
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
