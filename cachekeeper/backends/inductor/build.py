"""Compile one entry with Inductor into the job's roots (runs in a subprocess the worker launches).

    python -m cachekeeper.backends.inductor.build '<BuildJob json>'

Loads the component, compiles it the way a server would (`torch.compile(model, fullgraph=True,
dynamic=False)`, or `compile_repeated_blocks` for mode "repeated_blocks"), runs one warm-up call at the
entry's shape under `torch.no_grad()` (as diffusers pipelines do), and writes a JSON result with timings
and Inductor's cache counters, so callers can assert a rebuild "compiled nothing". On failure: one
`cachekeeper-build: error: ...` line on stderr and a non-zero exit.

The parent sets TORCHINDUCTOR_CACHE_DIR and TMPDIR (see InductorBackend.build_command); torch reads
both at import, so nothing here imports torch before `prepare_dirs` has run.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ...errors import BuildFailed, CachekeeperError
from ...warmup import build_inputs
from ..base import BuildJob, ModelRef

COUNTERS = {
    "inductor": ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass"),
    "aot_autograd": ("autograd_cache_hit", "autograd_cache_miss", "autograd_cache_bypass"),
}


def prepare_dirs(env: Mapping[str, str]) -> None:
    """Create the cache dir and TMPDIR: Python's tempfile silently ignores a TMPDIR that does not exist,
    and Inductor fixes its precompiled-header dir from it when torch._inductor.codecache is imported."""
    for var in ("TORCHINDUCTOR_CACHE_DIR", "TMPDIR"):
        if env.get(var):
            Path(env[var]).mkdir(parents=True, exist_ok=True)
    tempfile.tempdir = None  # re-read TMPDIR if anything consulted it already


def torch_dtype(name: str) -> Any:
    import torch

    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise BuildFailed(f"unknown dtype {name!r}")
    return dt


def load_component(ref: ModelRef, dtype: str, device: str) -> Any:
    """The component as a diffusers model class, from a local folder (or the hub when the ref says so)."""
    from diffusers import AutoModel

    _from_pretrained: Callable[..., Any] = AutoModel.from_pretrained  # untyped in diffusers
    if ref.pipeline or ref.tensor_parallel > 1:
        raise BuildFailed(f"{ref.name}: pipeline/tensor-parallel warm-up is not supported by the inductor backend")
    kwargs: dict[str, Any] = {"torch_dtype": torch_dtype(dtype)}
    if ref.path:
        source = ref.path
        # Accept a path to the component folder itself as well as to the pipeline folder.
        if not (Path(ref.path) / ref.component).is_dir() and (Path(ref.path) / "config.json").is_file():
            kwargs["subfolder"] = None
        else:
            kwargs["subfolder"] = ref.component
    elif ref.hub:
        source, kwargs["subfolder"] = ref.hub, ref.component
        if ref.revision:
            kwargs["revision"] = ref.revision
    else:
        raise BuildFailed(f"{ref.name}: the model has neither a path nor a hub id")
    try:
        model = _from_pretrained(source, **kwargs)
    except (OSError, ValueError) as exc:
        raise BuildFailed(f"{ref.name}: cannot load {ref.component} from {source}: {exc}") from None
    return model.to(device).eval().requires_grad_(False)


def compile_model(model: Any, mode: str, options: Mapping[str, str]) -> Any:
    """Compile as the server will: same API, same flags, else Dynamo produces a different graph key."""
    import torch

    kwargs: dict[str, Any] = {"fullgraph": True, "dynamic": False}
    if options.get("mode"):
        kwargs["mode"] = options["mode"]  # torch.compile mode, e.g. max-autotune
    if mode == "full":
        return torch.compile(model, **kwargs)
    if mode == "repeated_blocks":
        model.compile_repeated_blocks(**kwargs)
        return model
    raise BuildFailed(f"inductor has no compile mode {mode!r}", "use full or repeated_blocks")


def counters() -> dict[str, int]:
    """Inductor's FX-graph and AOT-autograd cache counters of this process (0 when never touched)."""
    from torch._dynamo.utils import counters as c

    return {name: int(c[group][name]) for group, names in COUNTERS.items() for name in names}


def phase_times() -> dict[str, float]:
    """Seconds per timed compiler phase (Dynamo's compilation_time_metrics, summed per phase)."""
    from torch._dynamo.utils import compilation_time_metrics

    return {k: round(sum(v), 3) for k, v in compilation_time_metrics.items()}


def breakdown(phases: Mapping[str, float]) -> dict[str, float]:
    """Where a first call's compile time went: Dynamo tracing vs the backend (on a cache hit, that is
    loading the AOT/FX entries and their kernels; on a miss, compiling)."""
    total = phases.get("_compile.compile_inner", 0.0)
    backend = phases.get("OutputGraph.call_user_compiler", 0.0)
    return {"dynamo_s": round(max(total - backend, 0.0), 3), "backend_s": round(backend, 3)}


def first_call(compiled: Any, inputs: Mapping[str, Any], device: str) -> float:
    """Seconds for one forward under no_grad, including compile or cache load, synchronised."""
    import torch

    t0 = time.perf_counter()
    with torch.no_grad():
        compiled(**inputs)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def run(job: BuildJob) -> dict[str, Any]:
    t0 = time.perf_counter()
    import torch

    t_import = time.perf_counter() - t0
    device = job.options.get("device", "cpu")
    t1 = time.perf_counter()
    model = load_component(job.model, job.spec.dtype, device)
    t_load = time.perf_counter() - t1
    compiled = compile_model(model, job.spec.mode, job.options)
    inputs = build_inputs(model, job.model, job.spec.shape, job.spec.dtype, device, job.options)
    t_first = first_call(compiled, inputs, device)
    return {
        "ok": True,
        "entry": job.spec.key,
        "torch": torch.__version__,
        "device": device,
        "timings": {"import_s": round(t_import, 3), "load_s": round(t_load, 3),
                    "first_call_s": round(t_first, 3), "total_s": round(time.perf_counter() - t0, 3)},
        "counters": counters(),
        "phases": phase_times(),
    }


def write_result(path: str, result: Mapping[str, Any]) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(result, indent=1, sort_keys=True))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m cachekeeper.backends.inductor.build '<job json>'", file=sys.stderr)
        return 2
    try:
        job = BuildJob.from_json(argv[0])
    except (ValueError, KeyError, TypeError) as exc:
        print(f"cachekeeper-build: error: bad job JSON: {exc}", file=sys.stderr)
        return 2
    prepare_dirs(os.environ)
    try:
        result = run(job)
    except CachekeeperError as exc:
        print(f"cachekeeper-build: error: {exc.message}", file=sys.stderr)
        return 1
    except Exception as exc:
        import traceback

        traceback.print_exc()
        print(f"cachekeeper-build: error: {job.spec.label()}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    write_result(job.result_path, result)
    print(json.dumps({"first_call_s": result["timings"]["first_call_s"], **result["counters"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
