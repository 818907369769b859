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
AOT_FORMAT = 1
EXTERNAL_FORWARD = "forward"   # external_data key of the model class's (unwrapped) forward
CONSTANT_TYPES = (type(None), bool, int, float, str)

# Entry-key options of an aot entry (light: importlib.metadata only). The function embeds the model's
# bytecode: a diffusers upgrade must select another entry, and a prebuild must build it.
KEY_DIFFUSERS = "aot_diffusers"
KEY_SOURCE = "aot_diffusers_src"


def key_options() -> tuple[tuple[str, str], ...]:
    """The installed diffusers version and a digest of its RECORD (the sha256 of every installed file,
    read from one small metadata file: ~2 ms, where hashing the 1,100 source files takes ~0.2 s). A
    same-version reinstall from another commit changes the digest. What the RECORD cannot see (an
    editable install, a patched file, the model's own code) the serving helper checks against the
    source checksums in meta.json before it calls the function."""
    try:
        dist = importlib.metadata.distribution("diffusers")
    except importlib.metadata.PackageNotFoundError:
        return ((KEY_DIFFUSERS, "none"), (KEY_SOURCE, "none"))
    record = dist.read_text("RECORD") or ""
    lines = sorted(line for line in record.splitlines() if line.split(",", 1)[0].endswith(".py"))
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16] if lines else "none"
    return ((KEY_DIFFUSERS, dist.version), (KEY_SOURCE, digest))


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
    versions: Mapping[str, str]                  # torch, diffusers

    def to_json(self) -> bytes:
        d = {k: v for k, v in self.__dict__.items()}
        d["sources"] = list(self.sources)
        return canonical.dumps({**d, "v": AOT_FORMAT})

    @classmethod
    def from_json(cls, data: bytes) -> AotMeta:
        """Raises ValueError on anything but a record of this format version."""
        d = json.loads(data)
        if not isinstance(d, dict) or d.get("v") != AOT_FORMAT:
            found = d.get("v") if isinstance(d, dict) else None
            raise ValueError(f"precompiled-function record format {found!r}, this cachekeeper reads {AOT_FORMAT}")
        d.pop("v")
        try:
            return cls(**{**d, "sources": tuple(d["sources"])})
        except (TypeError, KeyError) as exc:
            raise ValueError(f"malformed precompiled-function record: {exc}") from None


def compile_kwargs(options: Mapping[str, str]) -> dict[str, Any]:
    """The serving compile's arguments (the fallback uses the same, via build.compile_model)."""
    return {"fullgraph": True, "dynamic": False, **({"mode": options["mode"]} if options.get("mode") else {})}


# --- light helpers both sides use -------------------------------------------------------------------


def qualname(obj: Any) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def config_digest(model: Any) -> str:
    """The component's config (diffusers' FrozenDict), canonical; values JSON cannot hold become repr."""
    config = getattr(model, "config", None)
    items = dict(config) if isinstance(config, Mapping) else {}
    return canonical.digest(json.loads(json.dumps(items, sort_keys=True, default=repr)))


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
    return {"unsupported": type(value).__name__}


def call_spec(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    return {name: arg_spec(v) for name, v in sorted(kwargs.items())}


# --- prebuild (build subprocess; torch imported) ------------------------------------------------------


def check_inputs(spec: Mapping[str, Any], label: str) -> None:
    bad = sorted(name for name, s in spec.items() if "unsupported" in s)
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


def save(job: BuildJob, model: Any, inputs: Mapping[str, Any], compiled: Any) -> Path:
    """Write function.bin, then meta.json (the record last: a dir without it is never used)."""
    import torch

    from . import InductorBackend

    spec = call_spec(inputs)
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
        versions={"torch": torch.__version__, "diffusers": dict(job.spec.options).get(KEY_DIFFUSERS, "none")},
    )
    atomic_write_bytes(out / META_FILE, meta.to_json())
    return out


def prebuild(job: BuildJob, model: Any, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Precompile, save, then call the function once against eager (a function that disagrees with its
    own model is a build failure, not an artifact). Returns timings and the max abs difference."""
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
    diff = max_abs_diff(got, want)
    # Relative to the output's scale; half precision rounds differently in fused kernels.
    scale = max(1.0, max_abs(want))
    limit = (1e-3 if job.spec.dtype == "float32" else 5e-2) * scale
    if not diff <= limit:
        raise BuildFailed(f"{label}: the precompiled function differs from eager by {diff:.3g} (limit {limit:.3g})")
    out = save(job, model, inputs, compiled)
    return {"aot_compile_s": round(compile_s, 3), "aot_max_abs_diff": diff, "aot_dir": str(out)}


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
