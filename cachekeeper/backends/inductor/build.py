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

import os
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...errors import BuildFailed
from ...format.spec import COMPILE_MODE
from ..base import BuildJob
from ..build_main import build_main, component_and_inputs, torch_dtype
from ..pipeline_warmup import (
    as_keywords,
    call_kwargs,
    capture_inputs,
    check_size,
    component_of,
    load_pipeline,
    place,
    warmup_kind,
)
from . import aot

COUNTERS = {
    "inductor": ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass",
                 # what a load still compiles or benchmarks (CUDA; 0 on CPU): Triton kernels not found
                 # compiled, kernels emitted from the FX bundle, GEMM autotuning (max-autotune), coordinate
                 # descent benchmarks
                 "async_compile_cache_miss", "triton_bundler_read_and_emit_kernel", "select_algorithm_autotune",
                 "coordesc_tuning_bench"),
    "aot_autograd": ("autograd_cache_hit", "autograd_cache_miss", "autograd_cache_bypass"),
}


def prepare_dirs(env: Mapping[str, str]) -> None:
    """Create the cache dir and TMPDIR: Python's tempfile silently ignores a TMPDIR that does not exist,
    and Inductor fixes its precompiled-header dir from it when torch._inductor.codecache is imported."""
    for var in ("TORCHINDUCTOR_CACHE_DIR", "TMPDIR"):
        if env.get(var):
            Path(env[var]).mkdir(parents=True, exist_ok=True)
    tempfile.tempdir = None  # re-read TMPDIR if anything consulted it already


def compile_options(job: BuildJob) -> dict[str, str]:
    """The backend options, with the entry's own torch.compile mode (matrix key `compile_modes`, in its key
    as `compile_mode`) over `backend_options.inductor.mode`: what the server passes to torch.compile."""
    mode = dict(job.spec.options).get(COMPILE_MODE)
    return {**job.options, "mode": mode} if mode else dict(job.options)


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
    raise BuildFailed(f"inductor has no compile mode {mode!r}", "use full, repeated_blocks or aot")


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
    if job.model.tensor_parallel > 1:
        raise BuildFailed(f"{job.model.name}: the inductor backend builds on one device",
                          "set tensor_parallel: 1 for inductor entries")
    if warmup_kind(job.spec) == "pipeline":
        return run_pipeline(job, device, t0)
    model, inputs = component_and_inputs(job, device)  # captured from the pipeline, or built
    model = model.to(device)
    t_load = time.perf_counter() - t1
    aot_result: dict[str, Any] = {}
    if job.spec.mode == aot.MODE:  # a precompiled function, saved into the cache root (aot.py)
        t1 = time.perf_counter()
        aot_result = aot.prebuild(job, model, inputs)
        t_first = time.perf_counter() - t1
    else:
        t_first = first_call(compile_model(model, job.spec.mode, compile_options(job)), inputs, device)
    return {
        **aot_result,
        "ok": True,
        "entry": job.spec.key,
        "torch": torch.__version__,
        "device": device,
        "timings": {"import_s": round(t_import, 3), "load_s": round(t_load, 3),
                    "first_call_s": round(t_first, 3), "total_s": round(time.perf_counter() - t0, 3)},
        "counters": counters(),
        "phases": phase_times(),
    }


def compile_in_place(model: Any, mode: str, options: Mapping[str, str]) -> None:
    """`pipe.transformer.compile(fullgraph=True, dynamic=False)`: the call the server makes on the
    pipeline's own component (torch.compile(model) would wrap it in another module)."""
    kwargs: dict[str, Any] = {"fullgraph": True, "dynamic": False}
    if options.get("mode"):
        kwargs["mode"] = options["mode"]
    if mode == "full":
        model.compile(**kwargs)
    elif mode == "repeated_blocks":
        model.compile_repeated_blocks(**kwargs)
    else:
        raise BuildFailed(f"inductor has no pipeline compile mode {mode!r}", "use full or repeated_blocks")


def run_pipeline(job: BuildJob, device: str, t0: float) -> dict[str, Any]:
    """Load the pipeline, place it, compile the component in place, run one pipeline call through the VAE."""
    import torch

    ref = job.model
    if ref.offload and not device.startswith("cuda"):
        raise BuildFailed(f"{ref.name}: offload: {ref.offload} needs an accelerator; inductor builds on {device}",
                          "drop offload for this model or set backend_options.inductor.device: cuda")
    if ref.offload and job.spec.mode == aot.MODE:
        raise BuildFailed(f"{ref.name}: mode aot precompiles a resident component; offload: {ref.offload} "
                          "moves it per call", "drop offload for aot entries, or use mode repeated_blocks")
    t1 = time.perf_counter()
    pipe = load_pipeline(ref, torch_dtype(job.spec.dtype))
    model = component_of(pipe, ref)
    check_size(ref, job.spec, pipe, model)
    place(pipe, ref, device)
    t_load = time.perf_counter() - t1
    kwargs = call_kwargs(pipe, job.spec, ref)
    t2 = time.perf_counter()
    aot_result: dict[str, Any] = {}
    if job.spec.mode == aot.MODE:
        # The real pipeline call, stopped at the component's first call: its arguments are the serving
        # call by construction. The model stays as from_pretrained made it (requires_grad included:
        # the tensor guards and the FX-graph key see it), as the server's will be.
        args, captured = capture_inputs(pipe, model, kwargs)
        aot_result = aot.prebuild(job, model, as_keywords(model, args, captured), component=ref.component,
                                  warm_fallback=True)
    else:
        compile_in_place(model, job.spec.mode, compile_options(job))
        with torch.no_grad():
            pipe(**kwargs)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    t_first = time.perf_counter() - t2
    return {
        **aot_result,
        "ok": True, "entry": job.spec.key, "torch": torch.__version__, "device": device, "warmup": "pipeline",
        "pipeline": type(pipe).__name__,
        "timings": {"load_s": round(t_load, 3), "first_call_s": round(t_first, 3),
                    "total_s": round(time.perf_counter() - t0, 3)},
        "counters": counters(), "phases": phase_times(),
    }


def main(argv: list[str]) -> int:
    prepare_dirs(os.environ)  # before anything imports torch
    return build_main(argv, "cachekeeper.backends.inductor.build", run)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
