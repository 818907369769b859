"""Serving helper: a diffusers component's compiled form for a hydrated cache dir.

    from cachekeeper.runtime import compile_component
    compiled = compile_component(pipe.transformer)      # reads TORCHINDUCTOR_CACHE_DIR (hydrate --print-env)
    out = compiled(hidden_states=..., ...)              # keyword arguments, as pipelines call components

For each distinct call (argument names, tensor shapes/dtypes/devices, constant values) it serves the
precompiled function an Inductor `aot` entry put in `<cache dir>/ck-aot/`, or compiles with
`torch.compile` and the prebuild's arguments. It never runs a function that was not built for this call:

  * the guard filter of a precompiled function keeps only tensor and global-state guards, so the helper
    matches the call's whole argument set against the record (meta.json) itself, and checks the model's
    class, config, parameter device and dtype;
  * the record's toolchain fingerprint must equal this host's (another torch build, compiler, CPU ISA);
  * every source line Dynamo traced must hash as at prebuild (torch's SourceInfo checksums: a diffusers
    upgrade or an edited model under the same fingerprint), and the installed diffusers version match;
  * every kernel file the function needs must be present (else loading would silently recompile C++).

Any failure (also a load error or a rejected guard) is one warning line on the `cachekeeper.runtime`
logger, then the fallback compile; never an exception from the cache, unless the server asked for one:
`compile_pipeline(pipe, strict=True)`, or strict mode `fail` (strict_mode.py).

Strict mode and the compile ledger cover the whole process: `strict("fail")` (or CACHEKEEPER_STRICT, read
here, at import) makes every compile of it, `watch()` or not, an error; `compile_ledger()` is what it compiled
and why. Not imported by `import cachekeeper` or the hydrate path; torch is imported inside functions (and
when strict mode is `report` or `fail`: its hooks go into torch).
"""

from __future__ import annotations

from .component import CompiledComponent, compile_component
from .ledger import compile_ledger
from .miss_watch import watch
from .pipeline import CompiledPipeline, compile_pipeline
from .strict_mode import from_environment as _strict_from_environment
from .strict_mode import strict

__all__ = ["CompiledComponent", "CompiledPipeline", "compile_component", "compile_ledger", "compile_pipeline",
           "strict", "watch"]

_strict_from_environment()
