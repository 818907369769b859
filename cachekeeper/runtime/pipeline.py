"""Serving a whole diffusers pipeline from precompiled functions: `compile_pipeline(pipe)`.

    pipe = DiffusionPipeline.from_pretrained(path, torch_dtype=torch.float32).to("cpu")
    compile_pipeline(pipe)        # instead of pipe.transformer.compile(fullgraph=True, dynamic=False)
    image = pipe(prompt=..., height=..., width=...).images[0]

For each component an `aot` entry precompiled (its record in `<TORCHINDUCTOR_CACHE_DIR>/ck-aot/` names the
pipeline attribute), the dispatcher is set as the module's `forward`, an instance attribute. The pipeline
keeps the same module object: `pipe.transformer`, `.config`, `.dtype`, `.device` and the module's own hooks
(Module.__call__ runs them around `forward`) are untouched, and `restore()` deletes the attribute.

Each call is checked before a precompiled function runs, cheaply: the exact call (argument set, tensor
shapes, dtypes, devices, constants) selects a record, checked once per call signature against this process
(toolchain fingerprint, diffusers and transformers versions, traced source, kernels, the module tree);
per call only the signature's digest, torch's guards, and two O(1) tripwires run. The tripwires: the
first parameter's device and dtype (`pipe.to(...)` after install), and a flag torch's global module,
parameter and buffer registration hooks set when a submodule of a served component changes (a LoRA
loaded, a layer replaced). Either makes the signatures be checked again.

Anything else falls back, one warning line per reason, to `torch.compile` of the class's forward with
the prebuild's arguments (`aot.fallback_function`); the prebuild left that graph's cache entries in the
entry, so the fallback for the prebuilt call is a warm load. What is not served at all, also one line
each and the server keeps serving: no cache dir; a component under CPU-offload hooks (its module moves
per call, the function was built for a resident one; it runs as configured); a second call of
compile_pipeline on the same pipeline (the first one's functions stay).
"""

from __future__ import annotations

import inspect
import logging
import os
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..backends.inductor import aot
from .component import CACHE_ENV, CompiledComponent, Record, find_records

log = logging.getLogger("cachekeeper.runtime")

ATTR = "_cachekeeper_compiled"   # the pipeline's CompiledPipeline, set by compile_pipeline


# --- what the pipeline has (pure, over module attributes) -------------------------------------------


def offload_hooks(module: Any) -> str:
    """What moves this module's weights per call, if anything: accelerate's hooks (enable_model_cpu_offload,
    enable_sequential_cpu_offload) or diffusers' own (group offloading, layerwise casting)."""
    for name, sub in module.named_modules():
        where = f" on {name}" if name else ""
        if getattr(sub, "_hf_hook", None) is not None:
            return f"accelerate offload hooks{where} (enable_model_cpu_offload or enable_sequential_cpu_offload)"
        registry = getattr(sub, "_diffusers_hook", None)
        hooks = getattr(registry, "hooks", None)
        if hooks:
            return f"diffusers hooks{where} ({', '.join(sorted(hooks))})"
    return ""


def records_for(records: Sequence[Record], name: str, model: Any) -> list[Record]:
    """The records built for this pipeline attribute (format 1 records name no attribute: by class)."""
    cls = aot.qualname(type(model))
    return [r for r in records if r.meta is not None
            and (r.meta.component == name or (not r.meta.component and r.meta.model_class == cls))]


# --- watching the module tree (torch's global registration hooks) -----------------------------------

_WATCHED: dict[int, weakref.ref[ComponentForward]] = {}
_HANDLES: list[Any] = []


def _on_register(module: Any, name: str, value: Any) -> None:
    ref = _WATCHED.get(id(module))
    served = ref() if ref is not None else None
    if served is not None:
        served.tree_changed = True


def _watch(served: ComponentForward) -> None:
    if not _HANDLES:
        from torch.nn.modules import module as nn_module

        _HANDLES.extend(register(_on_register) for register in (
            nn_module.register_module_module_registration_hook,
            nn_module.register_module_parameter_registration_hook,
            nn_module.register_module_buffer_registration_hook))
    ref = weakref.ref(served)
    for sub in served.model.modules():
        _WATCHED[id(sub)] = ref


def _unwatch(served: ComponentForward) -> None:
    for key in [k for k, ref in _WATCHED.items() if ref() is served or ref() is None]:
        del _WATCHED[key]


# --- one served component ---------------------------------------------------------------------------


class ComponentForward(CompiledComponent):
    """The dispatcher set as `component.forward`: precompiled functions for the calls they were built for,
    `torch.compile` of the class's forward for the rest."""

    def __init__(self, name: str, model: Any, cache_dir: Path, records: Sequence[Record]) -> None:
        first = records[0].meta
        super().__init__(model, cache_dir, first.options if first else None, records)
        self.name = name
        self.tree_changed = False
        self._signature = inspect.signature(aot.unwrapped_forward(model))
        self._structure = aot.structure_digest(model)
        self._first = next(iter(model.parameters()), None)
        self._placement = self._place()
        _watch(self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if args:
            try:
                kwargs = self._by_name(args, kwargs)
            except TypeError as exc:
                return self._fall_back(f"positional arguments that do not bind by name ({exc})", args, kwargs)
        return super().__call__(**kwargs)

    def _lookup(self, kwargs: Mapping[str, Any]) -> tuple[str, Callable[..., Any] | None]:
        if self.tree_changed or self._place() != self._placement:   # the O(1) tripwires
            self._recheck()
        return super()._lookup(kwargs)

    def _by_name(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """Positional arguments by parameter name (SDXL calls its UNet so): records match keywords."""
        bound = self._signature.bind_partial(self.model, *args, **kwargs).arguments
        named = {k: v for k, v in bound.items() if k != "self"}
        if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name in named
               for p in self._signature.parameters.values()):
            raise TypeError("the forward takes *args or **kwargs")
        return named

    def _place(self) -> tuple[str, str]:
        p = self._first
        return ("", "") if p is None else (str(p.device), str(p.dtype))

    def _recheck(self) -> None:
        """The module tree or its placement changed since the signatures were checked: check them again
        (the next call of each signature chooses, checks and loads anew)."""
        self.tree_changed = False
        self._structure = aot.structure_digest(self.model)
        self._first = next(iter(self.model.parameters()), None)
        self._placement = self._place()
        self._by_call.clear()
        _watch(self)   # new submodules

    def _problem(self, meta: aot.AotMeta) -> str:
        if meta.structure_sha256 and meta.structure_sha256 != self._structure:
            return ("the module tree differs from the prebuilt one (a LoRA loaded or fused, a layer "
                    "replaced, other weights' shapes or dtypes)")
        return super()._problem(meta)

    def _compile_fallback(self) -> Any:
        return aot.fallback_function(self.model, self.options)

    def _warn(self, reason: str) -> None:
        super()._warn(f"{self.name}: {reason}")

    @property
    def label(self) -> str:
        return self.name


# --- the pipeline -----------------------------------------------------------------------------------


class CompiledPipeline:
    """What compile_pipeline installed on one pipeline, and why not elsewhere (`notes`)."""

    def __init__(self, pipe: Any, cache_dir: Path | None, strict: bool = False) -> None:
        self.pipe = pipe
        self.cache_dir = cache_dir
        self.strict = strict
        self.components: dict[str, ComponentForward] = {}
        self.notes: list[str] = []

    def install(self) -> None:
        import torch

        kind = type(self.pipe).__name__
        if self.cache_dir is None:
            self.note(f"{CACHE_ENV} is not set: no precompiled functions; {kind} runs as loaded")
            return
        records = find_records(self.cache_dir)
        for problem in sorted({r.problem for r in records if r.problem}):
            self.note(problem)
        modules = {name: m for name, m in self.pipe.components.items() if isinstance(m, torch.nn.Module)}
        for name, model in sorted(modules.items()):
            mine = records_for(records, name, model)
            if not mine:
                continue
            if hooks := offload_hooks(model):
                self.note(f"{name} has {hooks}: its precompiled function is for a resident module; "
                          f"{name} runs as configured")
            elif "forward" in model.__dict__:
                self.note(f"{name}.forward is already replaced ({getattr(model.forward, '__qualname__', '?')}); "
                          f"{name} runs as it is")
            else:
                served = ComponentForward(name, model, self.cache_dir, mine)
                served.strict = self.strict
                model.forward = served
                self.components[name] = served
        if not self.components and not self.notes:
            self.note(f"no precompiled function in {self.cache_dir} for a component of {kind}; it runs as loaded")

    def note(self, reason: str) -> None:
        if reason in self.notes:
            return
        self.notes.append(reason)
        log.warning("cachekeeper: warning: %s", reason)

    def restore(self) -> None:
        """The class's forward again on every served component (the pipeline as from_pretrained made it)."""
        for served in self.components.values():
            served.model.__dict__.pop("forward", None)
            _unwatch(served)
        self.components.clear()
        self.pipe.__dict__.pop(ATTR, None)

    def stats(self) -> dict[str, Any]:
        """Precompiled and fallback calls summed over the components, and every reason given."""
        parts = [s.stats for s in self.components.values()]
        return {"precompiled_calls": sum(s.precompiled_calls for s in parts),
                "fallback_calls": sum(s.fallback_calls for s in parts),
                "served": sorted(self.components), "loaded": [k for s in parts for k in s.loaded],
                "fallbacks": [*self.notes, *(r for s in parts for r in s.fallbacks)]}


def compile_pipeline(pipe: Any, cache_dir: str | os.PathLike[str] | None = None, *,
                     strict: bool = False) -> CompiledPipeline:
    """Serve the pipeline's precompiled components from `cache_dir` (default: the hydrated dir in
    TORCHINDUCTOR_CACHE_DIR). Never raises for the cache's sake: each reason it cannot serve something
    is one warning line on the `cachekeeper.runtime` logger, and that part runs as loaded or compiles.
    `strict=True`: a call no precompiled function serves raises CompileRefused instead of compiling."""
    existing = pipe.__dict__.get(ATTR)
    if isinstance(existing, CompiledPipeline):
        existing.note("compile_pipeline was called again on this pipeline; the first call's functions stay")
        return existing
    raw = cache_dir if cache_dir is not None else os.environ.get(CACHE_ENV)
    compiled = CompiledPipeline(pipe, Path(raw) if raw else None, strict)
    compiled.install()
    pipe.__dict__[ATTR] = compiled
    return compiled
