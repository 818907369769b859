"""Strict serving: `off`, `report` or `fail` for every compile of the process.

    CACHEKEEPER_STRICT=fail python -m my_server        # read when cachekeeper.runtime is imported
    cachekeeper.runtime.strict("fail")                   # or set in code (over the variable)
    strict: fail                                         # or the config's key, given to watch(pipe, config=...)

One precedence: a call of `strict()` over CACHEKEEPER_STRICT over the config's `strict:`. Once set to `report`
or `fail`, it covers every compiled function in the process, `watch()` or not (hooks.py): `report` records each
compile in the ledger and warns once per shape; `fail` raises `CompileRefused` before Inductor compiles, and
right after the compile where the runtime tells only then (TorchNeuron, TorchTPU; the error says the compile
ran). The error names the model, the shape (`96x64x1`), the entry that would have served it and the fix. A
cache hit is never a failure: only what the runtimes' own counters or new files in the served dir call a
compile is. `fail` without a hydrated dir is one error at the first call, naming the variable that is missing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import settings
from ..errors import CompileRefused, NotYetHydrated, UsageError
from ..reports.compiles import AUTOTUNE, FALLBACK, NOT_HYDRATED
from . import probe
from .ledger import Entry, compile_ledger
from .miss_watch import CACHE_ENV_OF, cache_dirs_from_env
from .served import Matrix, ServedDir, Verdict, judge

if TYPE_CHECKING:
    from ..config import Config
    from ..format.spec import Shape
    from .hooks import GraphCompile

log = logging.getLogger("cachekeeper.runtime")

MODES = ("off", "report", "fail")
_SOURCES = ("default", "config", "env", "call")   # weakest first
_state: dict[str, str] = {"mode": "off", "source": "default"}
_warned: set[tuple[str, ...]] = set()
_local = threading.local()
_lock = threading.Lock()
# Each backend's cache dir as the variables named it when cachekeeper.runtime was imported (before torch: once
# loaded, Inductor sets TORCHINDUCTOR_CACHE_DIR to its own default when it is unset).
_started_dirs = {backend: Path(os.environ[var]) for backend, var in CACHE_ENV_OF.items()
                 if os.environ.get(var) and "://" not in os.environ[var]}


# --- the mode ------------------------------------------------------------------------------------------


def mode() -> str:
    return _state["mode"]


def checked(raw: object, source: str) -> str:
    """`raw` as a mode, or the UsageError every setting gives (`env CACHEKEEPER_STRICT: ...` for the variable)."""
    value = raw.strip().lower() if isinstance(raw, str) else None
    if value not in MODES:
        raise UsageError(f"{source}: {raw!r} is not one of {', '.join(MODES)}",
                         f"give {source} {', '.join(MODES[:-1])} or {MODES[-1]}")
    return value


def strict(mode: str) -> str:
    """Set strict mode for the whole process: `off`, `report` or `fail` (over CACHEKEEPER_STRICT and the
    config's `strict:`). Returns the mode set."""
    return _set(checked(mode, "strict(mode=...)"), "call")


def from_environment() -> None:
    """CACHEKEEPER_STRICT, read once when cachekeeper.runtime is imported (a bad value: the UsageError)."""
    value = settings.STRICT.get()
    if value is not None:
        _set(value, "env")


def from_config(config: Config) -> None:
    """The config's `strict:`, unless the variable or a call of strict() set the mode."""
    _set(config.strict, "config")


def _set(value: str, source: str) -> str:
    with _lock:
        if _SOURCES.index(source) < _SOURCES.index(_state["source"]):
            return _state["mode"]
        _state.update(mode=value, source=source)
    if value != "off":
        from . import hooks

        for missing in hooks.ensure(load=True):
            probe.note(hooks.MISSING[missing])
    return value


# --- a watched call in progress ------------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """A graph compile the hooks saw during a watched call (or refused before it ran)."""

    compiled: probe.Compiled
    hints: tuple[str, ...]
    inputs: str
    ran: bool = True


@dataclass
class Call:
    model: str
    arguments: dict[str, Any]
    shape: Shape | None
    dirs: list[Path]
    matrix: Matrix | None = None
    events: list[Event] = field(default_factory=list)
    refused: CompileRefused | None = None

    @property
    def backend(self) -> str:
        """The backend the call serves with: the matrix's for its model, else a loaded runtime's."""
        return (self.matrix.backend_of(self.model) if self.matrix else None) or probe.served_backend()


@contextlib.contextmanager
def watching(call: Call) -> Iterator[Call]:
    _local.call = call
    try:
        yield call
    finally:
        _local.call = None


def current_call() -> Call | None:
    return getattr(_local, "call", None)


def refusal_in(exc: BaseException) -> CompileRefused | None:
    """The CompileRefused an exception carries (Dynamo wraps what a backend raises), or None."""
    seen = 0
    here: BaseException | None = exc
    while here is not None and seen < 16:
        if isinstance(here, CompileRefused):
            return here
        here = getattr(here, "inner_exception", None) or here.__cause__ or here.__context__
        seen += 1
    return None


# --- the served dir ------------------------------------------------------------------------------------


def served_dir(dirs: Sequence[Path], backend: str) -> Path | None:
    """The dir the backend's variable names (what hydrate exported), else the first dir watched."""
    var = CACHE_ENV_OF.get(backend)
    value = os.environ.get(var, "") if var else ""
    if value and "://" not in value:
        return Path(value)
    return dirs[0] if dirs else None


def check_hydrated(dirs: Sequence[Path], backend: str) -> None:
    """Under `fail`: a process with no hydrated dir (none named, or none that hydrate filled: no
    `.cachekeeper/state.json`) is refused at its first call, naming the variable."""
    if mode() != "fail":
        return
    from ..hydration.state import state_dir

    var = CACHE_ENV_OF.get(backend, "the runtime's cache dir variable")
    if not dirs:
        raise CompileRefused(f"strict mode fail: no hydrated dir: {var} is not set, so every {backend} compile of "
                             "this process would run here", "point it at the dir hydrate filled (the env hydrate "
                             "prints or writes), or unset CACHEKEEPER_STRICT")
    if not any((state_dir(d) / "state.json").is_file() for d in dirs):
        shown = ", ".join(str(d) for d in dirs)
        raise CompileRefused(f"strict mode fail: no hydrated dir: {var} names {shown}, which no hydrate filled "
                             "(no .cachekeeper/state.json there)", "hydrate it before the server starts, and "
                             "point the variable at the dir hydrate names", path=str(dirs[0]))


# --- deciding: the ledger, a warning, or the error ------------------------------------------------------


def _entry_text(verdict: Verdict, matrix: Matrix | None, shape: Shape | None) -> str:
    if verdict.key and not verdict.planned:
        return f"entry {verdict.key}, once {shape.label() if shape else 'the shape'} is in the matrix"
    if verdict.key:
        return f"entry {verdict.key}"
    if matrix is None or shape is None:
        return "unknown (watch(pipe, config=...) names it)"
    return "none: the matrix has no entry of this model"


def message(entry: Entry, verdict: Verdict, matrix: Matrix | None, shape: Shape | None) -> str:
    inputs = entry.arguments.get("inputs")
    what = f"model {entry.model} at {entry.shape}" if entry.shape else \
        f"model {entry.model} ({f'a graph of {inputs}; ' if inputs else ''}no shape outside watch())"
    if not entry.ran:
        head = f"strict: {what} would compile on {entry.backend}"
    else:
        amount = (f"{entry.graphs} graph{'s' if entry.graphs != 1 else ''}" if entry.graphs
                  else f"{entry.new_files} new files in the served dir")
        ran = ": the compile already ran (the runtime tells only afterwards)" if mode() == "fail" else ""
        head = f"strict: {what} compiled on {entry.backend} ({amount}, {entry.seconds:.1f} s){ran}"
    return (f"{head}; {verdict.why}; the entry that would serve it: {_entry_text(verdict, matrix, shape)}; "
            f"fix: {verdict.fix}")


def settle(entry: Entry, verdict: Verdict, matrix: Matrix | None, shape: Shape | None,
           served: ServedDir) -> CompileRefused | None:
    """`report`: one warning per model, shape and reason; `fail`: the error to raise (the caller raises it)."""
    text = message(entry, verdict, matrix, shape)
    if mode() == "fail":
        cls = NotYetHydrated if verdict.reason == NOT_HYDRATED else CompileRefused
        exc = cls(text, key=verdict.key, path=str(served.path) if served.path else None)
        exc.compiled = entry.ran
        return exc
    if mode() == "report":
        seen = (entry.backend, entry.model, entry.shape or str(entry.arguments.get("inputs")), entry.reason)
        with _lock:
            first = seen not in _warned
            _warned.add(seen)
        if first:
            log.warning("cachekeeper: warning: %s", text)
    return None


def _judged(hints: Sequence[str], model: str, backend: str, shape: Shape | None, dirs: Sequence[Path],
            matrix: Matrix | None) -> tuple[Verdict, ServedDir]:
    served = ServedDir.read(served_dir(dirs, backend))
    return judge(hints, model, backend, shape, served, matrix), served


# --- what the hooks call ---------------------------------------------------------------------------------


def _graph_dirs() -> list[Path]:
    call = current_call()
    return call.dirs if call is not None else cache_dirs_from_env()


def on_graph_start(graph: GraphCompile) -> None:
    dirs = _graph_dirs()
    if current_call() is None:   # the variable as this process started: Inductor sets its default once loaded
        mine = _started_dirs.get(graph.backend)
        check_hydrated([mine] if mine else [], graph.backend)
    graph.before = probe.snapshot(dirs)


def on_inductor_miss(graph: GraphCompile | None) -> None:
    """Inductor is about to compile a graph: under `fail`, refuse it now."""
    if mode() != "fail":
        return
    backend = graph.backend if graph is not None else "inductor"
    refused = _refuse_or_record(probe.Compiled(backend, 1, 0.0, 0, "runtime"),
                                graph.hints if graph is not None else (), graph, ran=False)
    if refused is not None:
        raise refused


def on_graph_compiled(graph: GraphCompile) -> None:
    """A backend returned a compiled graph: record what it compiled (nothing, on a hit); `fail` raises now."""
    if graph.before is None or (mode() == "off" and current_call() is None):
        return
    what = probe.compiled(graph.before, probe.snapshot(_graph_dirs()), graph.backend)
    if not what.any:
        return
    hints = (*graph.hints, *((AUTOTUNE,) if what.autotune else ()))
    refused = _refuse_or_record(what, hints, graph, ran=True)
    if refused is not None:
        raise refused


def _refuse_or_record(what: probe.Compiled, hints: Sequence[str], graph: GraphCompile | None, *,
                      ran: bool) -> CompileRefused | None:
    """Inside a watched call: an event of the call (its entry is made when the call ends), and under `fail` the
    error, named by the call. Outside: one ledger entry per graph, then the warning or the error."""
    inputs = graph.inputs if graph is not None else ""
    call = current_call()
    if call is not None:
        call.events.append(Event(what, tuple(hints), inputs, ran))
        if mode() != "fail":
            return None
        entry, verdict, served = call_entry(call, what, refused=True)
        call.refused = settle(entry, verdict, call.matrix, call.shape, served)
        return call.refused
    model = settings.MODEL.get() or (graph.code if graph is not None else "model")
    verdict, served = _judged(hints, model, what.backend, None, cache_dirs_from_env(), None)
    entry = Entry(what.backend, model, None, {"inputs": inputs}, what.graphs if ran else 0, what.seconds,
                  verdict.reason, what.source, verdict.key, what.new_files, ran=ran, refused=mode() == "fail")
    compile_ledger().add(entry)
    return settle(entry, verdict, None, None, served)


def refuse_fallback(component: str, why: str) -> CompileRefused:
    """compile_pipeline(strict=True): the call no precompiled function serves is refused before its fallback
    compiles (recorded in the ledger with the reason `fallback`), whatever the process's strict mode."""
    call = current_call()
    model = call.model if call is not None else (settings.MODEL.get() or component)
    shape = call.shape if call is not None else None
    verdict, served = _judged((FALLBACK,), model, "inductor", shape, call.dirs if call else cache_dirs_from_env(),
                              call.matrix if call else None)
    entry = Entry("inductor", model, shape.label() if shape else None, call.arguments if call else {"inputs": ""},
                  0, 0.0, verdict.reason, "runtime", verdict.key, ran=False, refused=True)
    if call is None:
        compile_ledger().add(entry)
    else:
        call.events.append(Event(probe.Compiled("inductor", 1, 0.0, 0, "runtime"), (FALLBACK,), "", ran=False))
    why = why if why.startswith(f"{component}: ") else f"{component}: {why or 'no precompiled function serves it'}"
    text = message(entry, verdict, call.matrix if call else None, shape).replace(
        f"; {verdict.why};", f"; {why}; compile_pipeline(strict=True) refuses the fallback;", 1)
    exc = CompileRefused(text, key=verdict.key, path=str(served.path) if served.path else None)
    if call is not None:
        call.refused = exc
    return exc


def call_entry(call: Call, whole: probe.Compiled, *, refused: bool) -> tuple[Entry, Verdict, ServedDir]:
    """The ledger entry of a watched call: what its graphs compiled (the hooks' events) and what the whole call
    changed (counters and files), judged against the served dir and the matrix."""
    ran = [e for e in call.events if e.ran]
    graphs = max(whole.graphs, sum(e.compiled.graphs for e in ran))
    seconds = sum(e.compiled.seconds for e in ran) or (whole.seconds if whole.any else 0.0)
    hints = tuple(dict.fromkeys(h for e in call.events for h in e.hints))
    source = "runtime" if graphs or any(e.compiled.source == "runtime" for e in call.events) else "files"
    backend = next((e.compiled.backend for e in call.events), whole.backend if whole.graphs else call.backend)
    verdict, served = _judged(hints, call.model, backend, call.shape, call.dirs, call.matrix)
    entry = Entry(backend, call.model, call.shape.label() if call.shape else None, call.arguments, graphs, seconds,
                  verdict.reason, source, verdict.key, whole.new_files, ran=bool(ran) or whole.any, refused=refused)
    return entry, verdict, served


def settle_call(call: Call, whole: probe.Compiled) -> tuple[Entry | None, CompileRefused | None]:
    """After a watched call: its ledger entry (None: it compiled nothing), and under `fail` the error to raise
    (the one already raised inside it, or one for what only the call's counters and files showed)."""
    if not whole.any and not call.events:
        return None, None
    entry, verdict, served = call_entry(call, whole, refused=mode() == "fail")
    compile_ledger().add(entry)
    if call.refused is not None:
        return entry, call.refused
    return entry, settle(entry, verdict, call.matrix, call.shape, served)


__all__ = ["MODES", "Call", "check_hydrated", "current_call", "from_config", "from_environment", "mode",
           "refusal_in", "settle_call", "strict", "watching"]
