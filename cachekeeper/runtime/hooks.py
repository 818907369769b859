"""Where strict mode and the compile ledger see every compile of the process, `watch()` or not, feature-detected
on the torch that is loaded (read in torch 2.10, 2.11, 2.12, 2.13 and 2.14.1; docs/backends.md):

  * every graph a backend compiles: Dynamo hands it to the backend in `OutputGraph.call_user_compiler(gm,
    example_inputs)` (torch/_dynamo/output_graph.py), whatever the backend (inductor, neuron, tpu). The hook
    snapshots the runtimes' counters around it (probe.py), knows the compile id (`CompileContext`: "0/1" is
    frame 0's second compile, a recompile after a guard failure) and the graph's inputs. What compiled is
    judged right after the backend returns: for TorchNeuron and TorchTPU that is the earliest point (their
    compile runs inside the backend, in C++, and says nothing before).
  * Inductor before it compiles: `FxGraphCache.load_with_key` counts `counters["inductor"]["fxgraph_cache_miss"]`
    just before Inductor generates and compiles the graph's code (torch/_inductor/codecache.py). The counter
    group becomes a `Counter` that calls strict mode first; under `fail` it raises there, so nothing is compiled
    and the error reaches the caller through Dynamo's `BackendCompilerFailed`. The AOTAutograd miss counter is
    not a place to raise: its lookup turns any exception into a cache bypass (autograd_cache.py), and compiles.

`torch._dynamo.callback_handler`'s start/end callbacks exist in all five versions but carry neither the graph nor
its backend, and an exception in an end callback leaves the handler's pending counter set, so no callback ever
runs again: they are not used. Nothing here imports torch unless strict mode asks for it (`ensure(load=True)`).
"""

from __future__ import annotations

import collections
import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..reports.compiles import FALLBACK, RECOMPILE

_local = threading.local()
_lock = threading.Lock()
_installed: dict[str, bool] = {}
MAX_INPUTS_TEXT = 200


@dataclass
class GraphCompile:
    """One graph a backend is compiling now (thread-local while it runs)."""

    backend: str
    compile_id: str
    inputs: str                   # the graph's inputs: "8x4:float32, 4:int64"
    code: str                     # the traced function's name
    before: Any = None            # probe.Snapshot
    started: float = field(default_factory=time.perf_counter)

    @property
    def hints(self) -> tuple[str, ...]:
        attempt = self.compile_id.rpartition("/")[2]
        recompile = (RECOMPILE,) if attempt.isdigit() and int(attempt) > 0 else ()
        return (*recompile, *((FALLBACK,) if in_fallback() else ()))


def current_graph() -> GraphCompile | None:
    return getattr(_local, "graph", None)


def in_fallback() -> bool:
    return bool(getattr(_local, "fallback", 0))


@contextlib.contextmanager
def fallback() -> Iterator[None]:
    """A precompiled function's fallback is running: what compiles in it has the reason `fallback`."""
    _local.fallback = getattr(_local, "fallback", 0) + 1
    try:
        yield
    finally:
        _local.fallback -= 1


def backend_name(compiler_fn: Any) -> str:
    """"inductor", "neuron", "tpu" or the compiler's own name."""
    name = str(getattr(compiler_fn, "compiler_name", "") or getattr(compiler_fn, "__name__", "") or compiler_fn)
    for known in ("inductor", "neuron", "tpu"):
        if known in name.lower():
            return known
    return name[:40] or "unknown"


def describe_inputs(example_inputs: Any) -> str:
    parts = []
    for x in example_inputs or ():
        shape = getattr(x, "shape", None)
        if shape is not None:
            parts.append(f"{'x'.join(str(d) for d in shape) or 'scalar'}:{str(getattr(x, 'dtype', '')).split('.')[-1]}")
        else:
            parts.append(type(x).__name__)
    text = ", ".join(parts)
    return text if len(text) <= MAX_INPUTS_TEXT else text[:MAX_INPUTS_TEXT - 3] + "..."


def _compile_id() -> str:
    guards = sys.modules.get("torch._guards")
    context = getattr(guards, "CompileContext", None)
    try:
        return str(context.current_compile_id()) if context is not None else ""
    except Exception:   # outside a Dynamo compile: no id
        return ""


def _wrap_call_user_compiler(original: Callable[..., Any]) -> Callable[..., Any]:
    from . import strict_mode

    def call_user_compiler(self: Any, gm: Any, example_inputs: Any, *args: Any, **kwargs: Any) -> Any:
        if current_graph() is not None:   # a backend that compiles a subgraph through Dynamo again
            return original(self, gm, example_inputs, *args, **kwargs)
        code = getattr(getattr(getattr(self, "root_tx", None), "f_code", None), "co_name", "") or "graph"
        graph = GraphCompile(backend_name(getattr(self, "compiler_fn", None)), _compile_id(),
                             describe_inputs(example_inputs), code)
        strict_mode.on_graph_start(graph)
        _local.graph = graph
        try:
            out = original(self, gm, example_inputs, *args, **kwargs)
        finally:
            _local.graph = None
        strict_mode.on_graph_compiled(graph)
        return out

    call_user_compiler.__wrapped__ = original  # type: ignore[attr-defined]
    return call_user_compiler


class Tripwire(collections.Counter):  # type: ignore[type-arg]
    """Dynamo's counter group, calling strict mode just before Inductor compiles (an FX-graph-cache miss)."""

    def __setitem__(self, key: Any, value: Any) -> None:
        if key == "fxgraph_cache_miss" and value > self.get(key, 0):
            from . import strict_mode

            strict_mode.on_inductor_miss(current_graph())
        super().__setitem__(key, value)


def ensure(load: bool = False) -> list[str]:
    """Install the hooks once per process (torch loaded first when `load`); what could not be hooked, one line
    each (strict mode says them once)."""
    if "torch" not in sys.modules and not load:
        return []
    with _lock:
        if _installed:
            return [k for k, ok in _installed.items() if not ok]
        try:
            import torch  # noqa: F401  (strict mode on: the server compiles with it)
        except ImportError:
            return []
        _installed["graph"] = _hook_graphs()
        _installed["inductor"] = _hook_inductor()
        return [k for k, ok in _installed.items() if not ok]


def _hook_graphs() -> bool:
    try:
        from torch._dynamo.output_graph import OutputGraph
    except ImportError:
        return False
    original = getattr(OutputGraph, "call_user_compiler", None)
    if not callable(original):
        return False
    if not hasattr(original, "__wrapped__"):
        OutputGraph.call_user_compiler = _wrap_call_user_compiler(original)  # type: ignore[method-assign]
    return True


def _hook_inductor() -> bool:
    try:
        from torch._dynamo import utils
    except ImportError:
        return False
    counters = getattr(utils, "counters", None)
    if not isinstance(counters, collections.defaultdict) or counters.default_factory is not collections.Counter:
        return isinstance(counters, collections.defaultdict) and counters.default_factory is Tripwire
    counters["inductor"] = Tripwire(counters["inductor"])
    counters.default_factory = Tripwire   # a group cleared (counters.clear()) comes back with the hook
    return True


MISSING = {"graph": "this torch has no OutputGraph.call_user_compiler: strict mode sees only calls through watch()",
           "inductor": "this torch's Dynamo counters are not a defaultdict of Counters: Inductor compiles are "
                       "refused right after they run, not before"}

__all__ = ["GraphCompile", "Tripwire", "backend_name", "current_graph", "describe_inputs", "ensure", "fallback",
           "in_fallback"]
