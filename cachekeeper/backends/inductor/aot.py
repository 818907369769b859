"""Precompiled Inductor functions (Inductor mode `aot`): the artifact, its record, and the prebuild step.

A cache dir cannot go below its floor: a hydrated first call still runs Dynamo and loads the compiled
graph (3.4 s on the tiny Flux). A function compiled ahead of time with
`torch.compile(forward, fullgraph=True, options={"guard_filter_fn": keep_portable_guards_unsafe})
.aot_compile(((model,), inputs))` and saved with `save_compiled_function` loads without Dynamo.

Layout: inside the entry's `cache` root, so one manifest and one hydrate bring the function together with
the compiled kernels it needs (loaded without them, it recompiles the C++: 24-51 s) and the header:

    <cache root>/ck-aot/<entry key>/function.bin   the serialized function (torch's format)
    <cache root>/ck-aot/<entry key>/meta.json      what it is for and what it needs (AOT_FORMAT)

Inductor's own names in its cache dir are two-character kernel dirs, fxgraph/, aotautograd/, triton/ and
locks/, so `ck-aot/` cannot collide. Entries of one toolchain hydrate into one dir: the entry key keeps
their functions apart.

`meta.json` lets the serving helper (`cachekeeper.runtime`) decide *before* loading whether the function
may run: the guard filter keeps only tensor and global-state guards, so the record names the exact
argument set (tensor shape, dtype, device; constant values), the model class and config, the toolchain
fingerprint, the source lines Dynamo traced (torch's own SourceInfo checksums) and every kernel file.

The top of this module is light (the hydrate path and the config planner read it); torch and diffusers
are imported inside the build functions only.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import BuildFailed
from ...format import canonical
from ...fs.atomic import atomic_write_bytes
from ..base import CACHE_ROOT, BuildJob

MODE = "aot"
AOT_DIR = "ck-aot"
FUNCTION_FILE = "function.bin"
META_FILE = "meta.json"
AOT_FORMAT = 2
# Format 1 records (component warm-ups of an earlier release) lack component, structure and warmup: they
# read with the defaults below. A reader of format 1 refuses a format 2 record by its version, one line.
READABLE_FORMATS = (1, 2)
EXTERNAL_FORWARD = "forward"   # external_data key of the model class's (unwrapped) forward
CONSTANT_TYPES = (type(None), bool, int, float, str)

# Entry-key options of an aot entry (light: importlib.metadata only). The function embeds the model's
# bytecode: a diffusers upgrade must select another entry, and a prebuild must build it.
KEY_DIFFUSERS = "aot_diffusers"
KEY_SOURCE = "aot_diffusers_src"
KEY_TRANSFORMERS = "aot_transformers"   # pipeline warm-ups: the text encoders make the captured call
PIPELINE_WARMUP = "pipeline"


def key_options(*, pipeline: bool = False) -> tuple[tuple[str, str], ...]:
    """The installed diffusers version and a digest of its RECORD (the sha256 of every installed file,
    read from one small metadata file: ~2 ms, where hashing the 1,100 source files takes ~0.2 s). A
    same-version reinstall from another commit changes the digest. What the RECORD cannot see (an
    editable install, a patched file, the model's own code) the serving helper checks against the
    source checksums in meta.json before it calls the function."""
    extra = ((KEY_TRANSFORMERS, installed_version("transformers")),) if pipeline else ()
    try:
        dist = importlib.metadata.distribution("diffusers")
    except importlib.metadata.PackageNotFoundError:
        return ((KEY_DIFFUSERS, "none"), (KEY_SOURCE, "none"), *extra)
    record = dist.read_text("RECORD") or ""
    lines = sorted(line for line in record.splitlines() if line.split(",", 1)[0].endswith(".py"))
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16] if lines else "none"
    return ((KEY_DIFFUSERS, dist.version), (KEY_SOURCE, digest), *extra)


def installed_version(dist: str) -> str:
    """A distribution's installed version, "none" when it is absent (metadata only, no import)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def entry_dir(cache_root: Path, entry_key: str) -> Path:
    return cache_root / AOT_DIR / entry_key


# --- the record ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AotMeta:
    """meta.json of one precompiled function (see the module docstring)."""

    entry: str                                   # entry key
    label: str                                   # human-readable entry
    fingerprint: Mapping[str, Any]               # Fingerprint.to_dict() of the building host
    options: Mapping[str, str]                   # backend options of the prebuild (fallback compile too)
    model_class: str                             # module.qualname of the component's class
    config_sha256: str                           # digest of the component's config
    forward: str                                 # module.qualname of the unwrapped forward
    inputs: Mapping[str, Any]                    # argument name -> tensor spec or constant (see arg_spec)
    sources: tuple[Mapping[str, Any], ...]       # torch SourceInfo: module, firstlineno, lastlineno, checksum
    files: Mapping[str, int]                     # cache-root-relative kernel files -> size
    versions: Mapping[str, str]                  # torch, diffusers (and transformers for a pipeline warm-up)
    component: str = ""                          # the pipeline attribute ("transformer"); "" in format 1
    structure_sha256: str = ""                   # structure_digest of the component; "" in format 1
    warmup: str = "component"                    # "pipeline": inputs captured from a real pipeline call

    def to_json(self) -> bytes:
        d = {k: v for k, v in self.__dict__.items()}
        d["sources"] = list(self.sources)
        return canonical.dumps({**d, "v": AOT_FORMAT})

    @classmethod
    def from_json(cls, data: bytes) -> AotMeta:
        """Raises ValueError on anything but a record of this format version."""
        d = json.loads(data)
        if not isinstance(d, dict) or d.get("v") not in READABLE_FORMATS:
            found = d.get("v") if isinstance(d, dict) else None
            raise ValueError(f"precompiled-function record format {found!r}, this cachekeeper reads "
                             f"{', '.join(map(str, READABLE_FORMATS))}")
        d.pop("v")
        try:
            return cls(**{**d, "sources": tuple(d["sources"])})
        except (TypeError, KeyError) as exc:
            raise ValueError(f"malformed precompiled-function record: {exc}") from None


def compile_kwargs(options: Mapping[str, str]) -> dict[str, Any]:
    """The serving compile's arguments (the fallback uses the same, via build.compile_model)."""
    return {"fullgraph": True, "dynamic": False, **({"mode": options["mode"]} if options.get("mode") else {})}


def fallback_function(model: Any, options: Mapping[str, str]) -> Any:
    """`torch.compile` of the class's forward bound to the model: the fallback of a pipeline component,
    whose own `forward` attribute is the serving dispatcher (compiling the module would trace into it).
    Its graph is the one `model.compile(fullgraph=True, dynamic=False)` traces (measured: each hits the
    other's FX-graph and AOT-autograd entries), so a `full` entry's cache serves it too. The prebuild of
    a pipeline `aot` entry runs it once, leaving those entries for this very call."""
    import types

    import torch

    return torch.compile(types.MethodType(type(model).forward, model), **compile_kwargs(options))


# --- light helpers both sides use -------------------------------------------------------------------


def qualname(obj: Any) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def config_digest(model: Any, *, private: bool = False) -> str:
    """The component's config (diffusers' FrozenDict), canonical; values JSON cannot hold become repr.
    diffusers' private keys (`_name_or_path`: where it was loaded from, `_diffusers_version`: of the
    saving release) do not shape the graph and differ between a build host and a server: left out,
    except for format 1 records (`private`), whose digest held them."""
    config = getattr(model, "config", None)
    items = dict(config) if isinstance(config, Mapping) else {}
    if not private:
        items = {k: v for k, v in items.items() if not str(k).startswith("_")}
    return canonical.digest(json.loads(json.dumps(items, sort_keys=True, default=repr)))


def record_config_digest(model: Any, meta: AotMeta) -> str:
    """The model's config digest as the record's format computed it (format 1 records have no structure)."""
    return config_digest(model, private=not meta.structure_sha256)


def structure_digest(model: Any) -> str:
    """What the traced graph assumes about the module tree: every submodule's path and class, every
    parameter's and buffer's path, shape and dtype. A LoRA loaded into the model (PEFT wraps each target
    layer) or a replaced layer changes it; new weight values of the same shapes (a LoRA fused and
    unloaded) do not, and need not: the function reads the parameters from the module on each call."""
    h = hashlib.sha256()
    for name, module in model.named_modules():
        h.update(f"m {name} {qualname(type(module))}\n".encode())
    for kind, tensors in (("p", model.named_parameters()), ("b", model.named_buffers())):
        for name, t in tensors:
            h.update(f"{kind} {name} {tuple(t.shape)} {t.dtype}\n".encode())
    return h.hexdigest()


def unwrapped_forward(model: Any) -> Any:
    """The class's forward without diffusers' decorators: what is compiled, pickled and re-bound."""
    return inspect.unwrap(type(model).forward)


def arg_spec(value: Any) -> dict[str, Any]:
    """What the precompiled function assumes about one argument: a tensor's shape, dtype, device and
    layout (the guards torch keeps cover these too), or a constant's exact value (the guards dropped
    these: `return_dict=True` would otherwise get the tuple-returning graph)."""
    import torch

    if isinstance(value, torch.Tensor):
        return {"tensor": list(value.shape), "dtype": str(value.dtype).removeprefix("torch."),
                "device": str(value.device), "contiguous": value.is_contiguous(),
                "requires_grad": value.requires_grad}
    if isinstance(value, CONSTANT_TYPES):
        return {"constant": value, "type": type(value).__name__}
    # FluxPipeline passes joint_attention_kwargs={} (a dict the forward reads): matched item by item.
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"dict": {k: arg_spec(v) for k, v in sorted(value.items())}}
    if isinstance(value, (list, tuple)):
        return {"sequence": [arg_spec(v) for v in value], "type": type(value).__name__}
    return {"unsupported": type(value).__name__}


def unsupported(spec: Mapping[str, Any]) -> bool:
    """Whether an argument's spec holds a value aot mode cannot match (at any depth)."""
    if "unsupported" in spec:
        return True
    if "dict" in spec:
        return any(unsupported(s) for s in spec["dict"].values())
    return any(unsupported(s) for s in spec.get("sequence", ()))


def call_spec(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    return {name: arg_spec(v) for name, v in sorted(kwargs.items())}


# --- prebuild (build subprocess; torch imported) ------------------------------------------------------


def check_inputs(spec: Mapping[str, Any], label: str) -> None:
    bad = sorted(name for name, s in spec.items() if unsupported(s))
    if bad:
        raise BuildFailed(f"{label}: aot mode takes tensor and constant arguments only; "
                          f"{', '.join(bad)} {'is' if len(bad) == 1 else 'are'} not",
                          "use mode full for this component, or an inputs builder with plain arguments")


def aot_compile(model: Any, inputs: Mapping[str, Any], options: Mapping[str, str], label: str) -> Any:
    """The precompiled function of `type(model).forward` at these inputs; a graph break is a BuildFailed."""
    import torch

    kwargs = compile_kwargs(options)
    compile_options: dict[str, Any] = {"guard_filter_fn": torch.compiler.keep_portable_guards_unsafe}
    if "mode" in kwargs:  # torch.compile takes mode or options, not both: expand the mode into options
        compile_options = {**torch._inductor.list_mode_options(kwargs.pop("mode")), **compile_options}
    fn = unwrapped_forward(model)
    try:
        with torch.no_grad():
            staged: Any = torch.compile(fn, options=compile_options, **kwargs)
            return staged.aot_compile(((model,), dict(inputs)))
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BuildFailed(f"{label}: cannot precompile {qualname(type(model))}.forward as one graph "
                          f"({type(exc).__name__}: {first})",
                          "a graph break stops aot mode (fullgraph); serve this model with mode full "
                          "or repeated_blocks") from None


def source_records(compiled: Any) -> tuple[dict[str, Any], ...]:
    """torch's SourceInfo of the function: every code object Dynamo traced, with a checksum of its lines."""
    info = compiled.source_info()
    return tuple(sorted(({"module": s.module, "firstlineno": s.firstlineno, "lastlineno": s.lastlineno,
                          "checksum": s.checksum} for s in info.inlined_sources),
                        key=lambda r: (r["module"], r["firstlineno"])))


def kernel_files(cache_root: Path) -> dict[str, int]:
    """Every file of the build's cache root (what the function may load), by relative path -> size.
    Locks and temp files are excluded as the snapshot excludes them."""
    from . import InductorBackend

    backend = InductorBackend()
    out: dict[str, int] = {}
    for p in sorted(cache_root.rglob("*")):
        rel = p.relative_to(cache_root).as_posix()
        if p.is_file() and not rel.startswith(AOT_DIR + "/") and backend.include(CACHE_ROOT, rel, p):
            out[rel] = p.stat().st_size
    return out


def save(job: BuildJob, model: Any, inputs: Mapping[str, Any], compiled: Any, component: str = "") -> Path:
    """Write function.bin, then meta.json (the record last: a dir without it is never used)."""
    import torch

    from . import InductorBackend

    spec = call_spec(inputs)
    options = dict(job.spec.options)
    options.setdefault(KEY_DIFFUSERS, "none")
    cache_root = Path(job.roots[CACHE_ROOT])
    out = entry_dir(cache_root, job.spec.key)
    fn = unwrapped_forward(model)
    try:
        data = type(compiled).serialize(compiled, {EXTERNAL_FORWARD: fn}).serialized_data
    except Exception as exc:
        raise BuildFailed(f"{job.spec.label()}: cannot save the precompiled function: {exc}") from None
    atomic_write_bytes(out / FUNCTION_FILE, data)
    meta = AotMeta(
        entry=job.spec.key, label=job.spec.label(),
        fingerprint=InductorBackend().fingerprint(job.options).to_dict(),
        options=dict(job.options), model_class=qualname(type(model)), config_sha256=config_digest(model),
        forward=qualname(fn), inputs=spec, sources=source_records(compiled), files=kernel_files(cache_root),
        versions={"torch": torch.__version__, **{dist: options[key] for dist, key in (
            ("diffusers", KEY_DIFFUSERS), ("transformers", KEY_TRANSFORMERS)) if key in options}},
        component=component, structure_sha256=structure_digest(model),
        warmup=PIPELINE_WARMUP if options.get("warmup") == PIPELINE_WARMUP else "component",
    )
    atomic_write_bytes(out / META_FILE, meta.to_json())
    return out


def prebuild(job: BuildJob, model: Any, inputs: Mapping[str, Any], *, component: str = "",
             warm_fallback: bool = False) -> dict[str, Any]:
    """Precompile, save, then call the function once against eager (a function that disagrees with its
    own model is a build failure, not an artifact). With `warm_fallback` (a pipeline entry) the serving
    fallback (`fallback_function`) also runs once on the same call, checked the same way, so the entry's
    cache root holds its FX-graph and AOT-autograd entries: a fallback at serve time is a warm load.
    Returns timings and the max abs differences."""
    import time

    import torch

    label = job.spec.label()
    check_inputs(call_spec(inputs), label)
    t0 = time.perf_counter()
    compiled = aot_compile(model, inputs, job.options, label)
    compile_s = time.perf_counter() - t0
    with torch.no_grad():
        got = compiled(model, **inputs)
        want = model(**inputs)
    diff = check_matches(got, want, job.spec.dtype, f"{label}: the precompiled function")
    result: dict[str, Any] = {"aot_compile_s": round(compile_s, 3), "aot_max_abs_diff": diff}
    if warm_fallback:
        t0 = time.perf_counter()
        with torch.no_grad():
            fallback = fallback_function(model, job.options)(**inputs)
        result["fallback_compile_s"] = round(time.perf_counter() - t0, 3)
        result["fallback_max_abs_diff"] = check_matches(fallback, want, job.spec.dtype,
                                                        f"{label}: the fallback compile")
    out = save(job, model, inputs, compiled, component)
    return {**result, "aot_dir": str(out)}


def tolerance(want: Any, dtype: str) -> float:
    """Relative to the output's scale; half precision rounds differently in fused kernels."""
    return (1e-3 if dtype == "float32" else 5e-2) * max(1.0, max_abs(want))


def check_matches(got: Any, want: Any, dtype: str, what: str) -> float:
    """The max abs difference of a compiled output from eager; beyond the tolerance a one-line BuildFailed."""
    diff = max_abs_diff(got, want)
    limit = tolerance(want, dtype)
    if not diff <= limit:
        raise BuildFailed(f"{what} differs from eager by {diff:.3g} (limit {limit:.3g})",
                          "report it with the entry's label; serve this model with mode full meanwhile")
    return diff


def max_abs(a: Any) -> float:
    """Largest |x| over the tensors of an output (0 when it has none)."""
    import torch

    if isinstance(a, torch.Tensor):
        return float(a.float().abs().max()) if a.numel() else 0.0
    if isinstance(a, (tuple, list)):
        return max((max_abs(x) for x in a), default=0.0)
    return 0.0


def max_abs_diff(a: Any, b: Any) -> float:
    """Largest elementwise |a - b| over matching tensors of two outputs (tuples/lists nested)."""
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return float((a.float() - b.float()).abs().max()) if a.numel() else 0.0
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and len(a) == len(b):
        return max((max_abs_diff(x, y) for x, y in zip(a, b, strict=True)), default=0.0)
    return 0.0 if a == b else float("inf")
