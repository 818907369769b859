"""Subprocess side of the backends: what a build does on the device. Runs in a fresh interpreter the
worker launches (`python -m cachekeeper.backends.<name>.build '<BuildJob json>'`), never in the host CLI.

Load the component (or the pipeline), shard it for tensor parallel, compile it in the entry's mode, warm
it up once at the entry's shape, count compiles, and print one `cachekeeper-build: error:` line on failure.
torch and diffusers are imported inside the functions only. The host side (versions, pins, fingerprints,
the build command) is `toolchain.py`.

Simulated device packages (tests/simulated/) stand in for torch-neuronx and torch_tpu on hosts without
the hardware. CPU torch has no "neuron" or "tpu" device, so a simulated package exposes a `SIMULATION`
object naming the device it really runs on and its compile counters; `device_runtime` is the one place
that reads it. Real packages have no such attribute and get the real device string.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import settings
from ..errors import BackendUnavailable, BuildFailed
from ..format.spec import ModelRef
from .base import CACHE_ROOT, BuildJob
from .counters import runtime_counters  # shared with the serving side (cachekeeper.runtime)

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from .toolchain import DeviceBackend, DeviceToolchain

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


def device_runtime(module: Any, tc: DeviceToolchain) -> DeviceRuntime:
    """The runtime of an imported device package. Only simulated packages define `SIMULATION`; they also
    implement the runtime's own counter functions, which are read the same way (the simulation's extra
    counts, e.g. `loaded_foreign`, are kept beside them)."""
    sim = getattr(module, "SIMULATION", None)
    if sim is None:
        stats = partial(runtime_counters, tc.counters) if tc.counters else None
        return DeviceRuntime(module.__name__, tc.device, tc.compile_backend, tc.dist_backend,
                             contextlib.nullcontext, stats, simulated=False)
    sim_stats: Callable[[], dict[str, int]] = sim.stats
    if tc.counters:
        counters = tc.counters

        def sim_stats() -> dict[str, int]:
            return {**sim.stats(), **runtime_counters(counters)}
    return DeviceRuntime(module.__name__, sim.device, tc.compile_backend, tc.dist_backend, sim.eager_mode,
                         sim_stats, simulated=True)


def import_device_package(name: str, backend: str, hint: str) -> Any:
    """Import the device package explicitly (builds run with TORCH_DEVICE_BACKEND_AUTOLOAD=0)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise BackendUnavailable.of(backend, f"cannot import {name}: {exc}", hint) from None


TORCH_BACKENDS_GROUP = "torch.backends"   # the entry-point group torch's autoload calls


def run_entry_point(name: str, backend: str, hint: str) -> None:
    """Do for one package what torch's autoload does for all (torch/__init__.py, _import_device_backends):
    load its `torch.backends` entry point and call it. torch_tpu 0.2.0 registers its device there only."""
    found = [ep for ep in importlib.metadata.entry_points(group=TORCH_BACKENDS_GROUP) if ep.name == name]
    if not found:
        raise BackendUnavailable.of(backend, f"no {TORCH_BACKENDS_GROUP} entry point named {name!r}: "
                                    "the device package's loader cannot run", hint)
    found[0].load()()


def device_registered(device: str) -> bool:
    """Whether torch knows the device type (a loader renames PrivateUse1 to it)."""
    import torch

    try:
        torch.device(device)
    except RuntimeError:
        return False
    return True


def load_device_package(tc: DeviceToolchain, backend: str, hint: str) -> DeviceRuntime:
    """Import the device package, run its loader, and check that its device exists: a build that cannot
    place the model says why here, not at `model.to(...)`."""
    module = import_device_package(tc.package, backend, hint)
    if tc.entry_point:
        run_entry_point(tc.entry_point, backend, hint)
    rt = device_runtime(module, tc)
    if not device_registered(rt.device):
        raise BackendUnavailable.of(backend, f"{tc.package}'s loader ran but registered no {rt.device!r} "
                                    "device: no chip on this host", "build on a host with the accelerator")
    return rt


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
    from .pipeline_warmup import captured_component, has_pipeline, to_device
    from .warmup import build_inputs

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
    return len(artifact_digests(root, pattern))


def artifact_digests(root: Path, pattern: Callable[[str, Path], bool]) -> dict[str, tuple[int, str]]:
    """Every artifact under `root` by relpath: (size, sha256). What a server added or rewrote is what it
    compiled, whatever its counters say."""
    if not root.is_dir():
        return {}
    out: dict[str, tuple[int, str]] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and not p.is_symlink() and pattern(rel, p):
            try:
                data = p.read_bytes()
            except OSError:
                continue
            out[rel] = (len(data), hashlib.sha256(data).hexdigest())
    return out


def files_diff(before: Mapping[str, tuple[int, str]], after: Mapping[str, tuple[int, str]]) -> dict[str, Any]:
    """New, changed (size or sha256) and removed artifacts: names kept (at most 20 of each)."""
    added = sorted(set(after) - set(before))
    changed = sorted(k for k in set(after) & set(before) if after[k] != before[k])
    removed = sorted(set(before) - set(after))
    return {"added": len(added), "changed": len(changed), "removed": len(removed),
            "added_names": added[:20], "changed_names": changed[:20], "removed_names": removed[:20]}


def warn(line: str) -> None:
    print(f"cachekeeper-build: warning: {line}", file=sys.stderr)


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


# The device check's server: a pipeline call unlike the build's (JSON {"steps", "prompt", "seed"}).
WARMUP_STEPS_OPTION = "warmup_steps"   # backend option: the step counts a pipeline warm-up runs ("4,28")


def warmup_steps(options: Mapping[str, str]) -> list[int]:
    raw = options.get(WARMUP_STEPS_OPTION, "")
    try:
        steps = [int(x) for x in raw.replace(" ", "").split(",") if x]
    except ValueError:
        raise BuildFailed(f"{WARMUP_STEPS_OPTION} must be step counts separated by commas, not {raw!r}") from None
    if any(n < 1 for n in steps):
        raise BuildFailed(f"{WARMUP_STEPS_OPTION} must be positive step counts, not {raw!r}")
    return steps


def pipeline_calls(pipe: Any, job: BuildJob) -> list[dict[str, Any]]:
    """The pipeline calls to make: the build's (one per `warmup_steps`, else one of the default count), or
    the device check's server call (settings.SERVE_CALL), which differs in steps, prompt and seed."""
    from .pipeline_warmup import call_kwargs

    call = settings.SERVE_CALL.get()
    if call:
        return [call_kwargs(pipe, job.spec, job.model, prompt=str(call["prompt"]), steps=int(call["steps"]),
                            seed=int(call["seed"]))]
    steps = warmup_steps(job.options)
    if not steps:
        return [call_kwargs(pipe, job.spec, job.model)]
    return [call_kwargs(pipe, job.spec, job.model, steps=n) for n in steps]


def prepare_call(job: BuildJob, rt: DeviceRuntime, eager_modes: tuple[str, ...], *,
                 tensor_parallel: bool) -> Callable[[], Any]:
    """Load, shard, place and compile as the server does; returns the warm-up call: the whole pipeline
    (`warmup: pipeline`) or the component on its captured (or built) inputs."""
    from .pipeline_warmup import check_size, component_of, load_pipeline, place, warmup_kind

    if warmup_kind(job.spec) == "pipeline":
        pipe = load_pipeline(job.model, torch_dtype(job.spec.dtype))
        model = component_of(pipe, job.model)
        check_size(job.model, job.spec, pipe, model)
        if tensor_parallel:
            init_tensor_parallel(rt, model)
        place(pipe, job.model, rt.device)
        compile_for_mode(model, job.spec.mode, rt, eager_modes)
        calls = pipeline_calls(pipe, job)
        return lambda: [pipe(**kwargs) for kwargs in calls]
    model, inputs = component_and_inputs(job, rt.device)
    if tensor_parallel:
        init_tensor_parallel(rt, model)
    model.to(rt.device)
    compile_for_mode(model, job.spec.mode, rt, eager_modes)
    return lambda: model(**inputs)


def run_build(job: BuildJob, rt: DeviceRuntime, *, eager_modes: tuple[str, ...],
              is_artifact: Callable[[str, Path], bool],
              runtime_facts: Callable[[], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Load, (shard), place, compile, warm up once at the entry's shape; return the result record."""
    import torch

    t0 = time.perf_counter()
    cache = Path(job.roots[CACHE_ROOT])
    digests = artifact_digests(cache, is_artifact)
    before = len(digests)
    rank, size = world()
    call = prepare_call(job, rt, eager_modes, tensor_parallel=size > 1)
    t1 = time.perf_counter()
    eager = rt.eager() if job.spec.mode in eager_modes else contextlib.nullcontext()
    with torch.no_grad(), eager:
        call()
    first_call = time.perf_counter() - t1
    stats = gather_stats(rt)
    after_digests = artifact_digests(cache, is_artifact)
    after = len(after_digests)
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
        # The cross-check of the counters: what this run wrote into the cache root (names, sizes, sha256).
        "files": files_diff(digests, after_digests),
        # Top dirs holding artifacts (TorchTPU: the platform fingerprint dirs the runtime used).
        "top_dirs": sorted({k.split("/", 1)[0] for k in after_digests if "/" in k}),
        # What the runtime itself reports about its key (Neuron: the platform target and LNC).
        "runtime": runtime_facts() if runtime_facts is not None else {},
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
    if int(os.environ.get("RANK", "0")) == 0:
        for line in settings.BUILD_WARNINGS.get() or ():
            warn(line)
    try:
        job = BuildJob.from_json(argv[0])
    except (ValueError, KeyError, TypeError) as exc:
        print(f"cachekeeper-build: error: bad job JSON: {exc}", file=sys.stderr)
        return 2
    built = False
    try:
        result = build(job)
        built = True
    except CachekeeperError as exc:
        print(f"cachekeeper-build: error: {exc.message}", file=sys.stderr)
        if exc.hint:  # only a raise site's own next step: class hints live in the CLI's table
            print(f"cachekeeper-build: hint: {exc.hint}", file=sys.stderr)
        return 1
    except Exception as exc:
        import traceback

        traceback.print_exc()
        print(f"cachekeeper-build: error: {job.spec.label()}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    finally:
        _close_process_group(wait_for_peers=built)
    if result.get("rank", 0) == 0:
        write_result(job.result_path, result)
        print(json.dumps({"counters": result.get("counters")}))
    return 0


def _close_process_group(*, wait_for_peers: bool) -> None:
    """Tear a tensor-parallel build's process group down, a rank that built waiting for its peers first: rank 0
    tearing down and exiting while rank 1 was still at work aborted rank 1 in gloo ("terminate called without
    an active exception", SIGABRT), and the build failed (seen on 2 loaded cores). A rank that failed does not
    wait: torchrun stops the others when it exits."""
    if "torch.distributed" not in sys.modules:
        return
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        if wait_for_peers:
            dist.barrier()
        dist.destroy_process_group()


def device_build(backend: DeviceBackend, job: BuildJob) -> dict[str, Any]:
    """The one build of every device backend: its `toolchain` says which package, device and modes."""
    # Env the device package must see at import (Neuron: one core per tensor-parallel rank).
    os.environ.update(backend.rank_env(os.environ))
    import torch  # noqa: F401  (before the device package, as autoload would)

    tc = backend.toolchain
    rt = load_device_package(tc, backend.name, backend.install_hint)
    facts = backend.runtime_facts(job)   # before any compile: a build for another target stops here
    return run_build(job, rt, eager_modes=tc.eager_modes, is_artifact=partial(backend.include, CACHE_ROOT),
                     runtime_facts=lambda: facts)


def device_main(backend: DeviceBackend, argv: list[str]) -> int:
    """The entry point of a device backend's build module (its build.py)."""
    return build_main(argv, backend.toolchain.build_module, partial(device_build, backend))
