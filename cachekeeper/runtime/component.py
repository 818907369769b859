"""One diffusers component's compiled form for a hydrated cache dir (`compile_component`); the package
docstring (`cachekeeper.runtime`) describes the rules it serves by."""

from __future__ import annotations

import hashlib
import importlib
import inspect
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backends.inductor import aot
from ..format import canonical
from ..format.fingerprint import Fingerprint

log = logging.getLogger("cachekeeper.runtime")

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


@dataclass(frozen=True)
class Record:
    """One precompiled function found in a cache dir (or why its record is unusable)."""

    dir: Path
    meta: aot.AotMeta | None
    problem: str = ""


@dataclass(frozen=True)
class Choice:
    """What one call signature gets: a record to load, or the reason it compiles instead."""

    record: Record | None
    reason: str = ""


@dataclass
class Stats:
    precompiled_calls: int = 0
    fallback_calls: int = 0
    loaded: list[str] = field(default_factory=list)        # entry keys loaded
    fallbacks: list[str] = field(default_factory=list)     # reasons, one per signature


# --- finding records (I/O) --------------------------------------------------------------------------


def find_records(cache_dir: Path) -> list[Record]:
    """Every `ck-aot/<entry>/` with its parsed record; an unreadable record is kept with its problem."""
    root = cache_dir / aot.AOT_DIR
    out: list[Record] = []
    try:
        dirs = sorted(root.iterdir()) if root.is_dir() else []
    except OSError as exc:
        return [Record(root, None, f"cannot list {root}: {exc.strerror}")]
    for d in dirs:
        try:
            out.append(Record(d, aot.AotMeta.from_json((d / aot.META_FILE).read_bytes())))
        except (OSError, ValueError) as exc:
            out.append(Record(d, None, f"unreadable record {d / aot.META_FILE}: {exc}"))
    return out


# --- choosing (pure) --------------------------------------------------------------------------------


def describe(spec: Mapping[str, Any]) -> str:
    """A short human form of a call spec: tensor shapes and dtypes, constants."""
    parts = []
    for name, s in sorted(spec.items()):
        if "tensor" in s:
            parts.append(f"{name}={'x'.join(map(str, s['tensor'])) or 'scalar'}:{s['dtype']}@{s['device']}")
        elif "constant" in s:
            parts.append(f"{name}={s['constant']!r}")
        elif "dict" in s:
            parts.append(f"{name}={{{describe(s['dict'])}}}")
        elif "sequence" in s:
            parts.append(f"{name}=[{describe({str(i): v for i, v in enumerate(s['sequence'])})}]")
        else:
            parts.append(f"{name}=<{s.get('unsupported', '?')}>")
    return " ".join(parts)


def spec_difference(want: Mapping[str, Any], have: Mapping[str, Any]) -> str:
    """Why a call does not match a record: the first differing argument, named."""
    if set(want) != set(have):
        extra, missing = sorted(set(want) - set(have)), sorted(set(have) - set(want))
        return "argument set differs" + (f" (extra: {', '.join(extra)})" if extra else "") + \
            (f" (missing: {', '.join(missing)})" if missing else "")
    for name in sorted(want):
        if want[name] != have[name]:
            return f"{name}: {describe({name: want[name]})} vs prebuilt {describe({name: have[name]})}"
    return ""


def choose(records: Sequence[Record], model_class: str, spec: Mapping[str, Any]) -> Choice:
    """The record built for exactly this call of this class, else why there is none."""
    if not records:
        return Choice(None, f"no precompiled functions ({aot.AOT_DIR}/ is empty or missing)")
    usable = [r for r in records if r.meta is not None and r.meta.model_class == model_class]
    if not usable:
        problems = [r.problem for r in records if r.problem]
        return Choice(None, problems[0] if problems else f"no precompiled function for {model_class}")
    for r in usable:
        assert r.meta is not None
        if dict(r.meta.inputs) == dict(spec):
            return Choice(r)
    closest = min(usable, key=lambda r: len(spec_difference(spec, r.meta.inputs)) if r.meta else 0)
    assert closest.meta is not None
    return Choice(None, f"no precompiled function for this call of {model_class.rsplit('.', 1)[-1]} "
                        f"({spec_difference(spec, closest.meta.inputs)})")


def fingerprint_problem(meta: aot.AotMeta, here: Fingerprint) -> str:
    built = Fingerprint.from_dict(meta.fingerprint)
    if built.id == here.id:
        return ""
    diff = built.diff(here)
    shown = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in list(diff.items())[:3])
    return f"built for another toolchain ({shown})"


# --- checks against the live process (light I/O, no torch) ------------------------------------------


def source_problem(sources: Sequence[Mapping[str, Any]]) -> str:
    """The first traced code whose source lines no longer hash as recorded (torch's SourceInfo scheme:
    sha256 of the lines firstlineno..lastlineno-1 of the module's current source)."""
    for s in sources:
        name = str(s["module"])
        try:
            module = sys.modules.get(name) or importlib.import_module(name)
            lines = inspect.getsourcelines(module)[0][int(s["firstlineno"]) - 1:int(s["lastlineno"]) - 1]
        except (ImportError, OSError, TypeError) as exc:
            return f"source of {name} unavailable ({exc})"
        if hashlib.sha256("".join(lines).encode()).hexdigest() != s["checksum"]:
            return f"source of {name} (lines {s['firstlineno']}-{s['lastlineno']}) changed since the prebuild"
    return ""


def version_problem(meta: aot.AotMeta) -> str:
    """diffusers (always recorded) and transformers (recorded for pipeline warm-ups) as at prebuild."""
    for dist in ("diffusers", "transformers"):
        if dist != "diffusers" and dist not in meta.versions:
            continue
        built, here = meta.versions.get(dist, "none"), aot.installed_version(dist)
        if built != here:
            return f"built with {dist} {built}, this process has {here}"
    return ""


def files_problem(cache_dir: Path, files: Mapping[str, int]) -> str:
    """A kernel the function needs is missing or truncated: loading would recompile it (tens of s)."""
    for rel, size in sorted(files.items()):
        try:
            actual = (cache_dir / rel).stat().st_size
        except OSError:
            return f"kernel file {rel} is missing from {cache_dir}"
        if actual != size:
            return f"kernel file {rel} has {actual} bytes, the prebuild wrote {size}"
    return ""


# --- the helper -------------------------------------------------------------------------------------


class CompiledComponent:
    """Callable stand-in for `torch.compile(model)` that serves precompiled functions when it safely can."""

    def __init__(self, model: Any, cache_dir: Path | None, options: Mapping[str, str] | None = None,
                 records: Sequence[Record] | None = None) -> None:
        self.model = model
        self.cache_dir = cache_dir
        self.options = dict(options or {})
        self.records = list(records) if records is not None else (find_records(cache_dir) if cache_dir else [])
        self.stats = Stats()
        self._by_call: dict[str, Callable[..., Any] | None] = {}   # call digest -> precompiled fn / None
        self._fallback: Any = None
        self.strict = False   # True: a call no precompiled function serves raises instead of compiling

    # --- dispatch ---

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if args:
            return self._fall_back("positional arguments (precompiled functions are matched by keyword)",
                                   args, kwargs)
        key, fn = self._lookup(kwargs)
        if fn is None:
            return self._fall_back("", args, kwargs)
        try:
            ok = bool(fn.guard_check(self.model, **kwargs))  # type: ignore[attr-defined]
        except Exception as exc:
            ok, why = False, f"{type(exc).__name__}: {exc}"
        else:
            why = "torch's guards reject the call"
        if not ok:
            self._by_call[key] = None
            return self._fall_back(f"precompiled function not used: {why}", args, kwargs)
        try:
            out = fn(self.model, **kwargs)
        except Exception as exc:  # inference is side-effect free: run it the other way
            self._by_call[key] = None
            return self._fall_back(f"precompiled function failed ({type(exc).__name__}: {exc})", args, kwargs)
        self.stats.precompiled_calls += 1
        return out

    def precompiled_for(self, **kwargs: Any) -> bool:
        """Whether a call with these arguments would run a precompiled function (checked and loaded now,
        once per signature; a warning names the reason when not). Runs nothing."""
        return self._lookup(kwargs)[1] is not None

    def _lookup(self, kwargs: Mapping[str, Any]) -> tuple[str, Callable[..., Any] | None]:
        spec = aot.call_spec(kwargs)
        try:
            key = canonical.digest(spec)
        except (TypeError, ValueError):  # e.g. a NaN constant: no record can name it
            key = repr(sorted(kwargs))
            if key not in self._by_call:
                self._warn(f"arguments without a canonical form ({describe(spec)})")
                self._by_call[key] = None
        if key not in self._by_call:
            try:
                self._by_call[key] = self._prepare(spec)
            except Exception as exc:  # the cache must never take the server down
                self._warn(f"cannot check the precompiled functions ({type(exc).__name__}: {exc})")
                self._by_call[key] = None
        return key, self._by_call[key]

    def _prepare(self, spec: Mapping[str, Any]) -> Callable[..., Any] | None:
        """Choose, check and load the function for one call signature; None (after one warning) if not."""
        choice = choose(self.records, aot.qualname(type(self.model)), spec)
        if choice.record is None or choice.record.meta is None:
            self._warn(choice.reason if self.cache_dir else f"{CACHE_ENV} is not set")
            return None
        record, meta = choice.record, choice.record.meta
        self.options = dict(meta.options)  # the fallback compiles as the prebuild did
        problem = self._problem(meta)
        if problem:
            self._warn(f"{record.dir.name}: {problem}")
            return None
        try:
            fn = self._load(record, meta)
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            self._warn(f"{record.dir.name}: cannot load {aot.FUNCTION_FILE} ({type(exc).__name__}: {first})")
            return None
        self.stats.loaded.append(meta.entry)
        if self.cache_dir is not None:  # the dest's disk budget evicts by last use (hydration/usage.py)
            from ..hydration.state import record_use

            record_use(self.cache_dir, [meta.entry])
        return fn

    def _problem(self, meta: aot.AotMeta) -> str:
        from ..backends.inductor import InductorBackend
        from ..errors import CachekeeperError

        if aot.record_config_digest(self.model, meta) != meta.config_sha256:
            return "the model's config differs from the prebuilt one"
        if problem := self._parameter_problem(meta):
            return problem
        try:
            here = InductorBackend().fingerprint(meta.options)
        except CachekeeperError as exc:
            return f"cannot fingerprint this host: {exc}"
        assert self.cache_dir is not None
        return (fingerprint_problem(meta, here) or version_problem(meta) or source_problem(meta.sources)
                or files_problem(self.cache_dir, meta.files))

    def _parameter_problem(self, meta: aot.AotMeta) -> str:
        want_device = meta.options.get("device", "cpu")
        for p in self.model.parameters():
            device = str(p.device)
            if device != want_device and not (want_device == "cuda" and device.startswith("cuda")):
                return f"the model is on {device}, the function was built for {want_device}"
            break
        return ""

    def _load(self, record: Record, meta: aot.AotMeta) -> Callable[..., Any]:
        import torch

        fn = aot.unwrapped_forward(self.model)
        if aot.qualname(fn) != meta.forward:
            raise RuntimeError(f"forward is {aot.qualname(fn)}, the record names {meta.forward}")
        # The record's fingerprint equals this host's (CPU ISA, compiler identity, torch): Inductor's ISA
        # probes, child processes run on every load (seconds), could only confirm what the prebuild found.
        skip_probes = {"cpp.vec_isa_ok": True} if meta.options.get("device", "cpu") == "cpu" else {}
        with open(record.dir / aot.FUNCTION_FILE, "rb") as f, torch._inductor.config.patch(skip_probes):
            loaded: Callable[..., Any] = torch.compiler.load_compiled_function(
                f, f_globals=fn.__globals__, external_data={aot.EXTERNAL_FORWARD: fn})
        return loaded

    # --- fallback ---

    def _fall_back(self, reason: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        if reason:
            self._warn(reason)
        if self.strict:   # compile_pipeline(strict=True): no fallback compile, one error instead
            from .strict_mode import refuse_fallback

            raise refuse_fallback(self.label, reason or (self.stats.fallbacks[-1] if self.stats.fallbacks else ""))
        from .hooks import fallback

        with fallback():   # what compiles in here has the ledger's reason `fallback`
            if self._fallback is None:
                self._fallback = self._compile_fallback()
            self.stats.fallback_calls += 1
            return self._fallback(*args, **kwargs)

    @property
    def label(self) -> str:
        return type(self.model).__name__

    def _compile_fallback(self) -> Any:
        from ..backends.inductor.build import compile_model

        return compile_model(self.model, "full", self.options)

    def _warn(self, reason: str) -> None:
        if reason in self.stats.fallbacks:  # one line per reason, not one per call
            return
        self.stats.fallbacks.append(reason)
        instead = "strict: not compiled (compile_pipeline(strict=True))" if self.strict else \
            "compiling with torch.compile instead"
        log.warning("cachekeeper: warning: %s; %s", reason, instead)


def compile_component(model: Any, cache_dir: str | os.PathLike[str] | None = None,
                      options: Mapping[str, str] | None = None) -> CompiledComponent:
    """The component's compiled form: precompiled functions from `cache_dir` (default: the hydrated dir
    in TORCHINDUCTOR_CACHE_DIR), else `torch.compile` with `options` (the prebuild's backend options,
    e.g. {"mode": "max-autotune"}; a matching record's own options win)."""
    raw = cache_dir if cache_dir is not None else os.environ.get(CACHE_ENV)
    return CompiledComponent(model, Path(raw) if raw else None, options)


__all__ = ["CACHE_ENV", "CompiledComponent", "Record", "compile_component", "find_records"]
