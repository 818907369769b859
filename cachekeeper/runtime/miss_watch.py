"""What a serving process served and what it cost, recorded by one line: `pipe = watch(pipe)`.

    from cachekeeper.runtime import watch
    pipe = watch(pipe, model="flux")          # the config's model name (or CACHEKEEPER_MODEL)
    image = pipe(prompt, height=768, width=1360).images[0]

Per call it records the arguments that change a compiled graph (height, width, images per prompt,
guidance scale, max sequence length), whether the call compiled anything and the wall time. "Compiled" is
what the loaded runtimes' own counters say (probe.py: Inductor's FX-graph and AOTAutograd misses,
TorchNeuron's TotalCompilations, TorchTPU's per-entry compile durations), cross-checked by new files in the
backend's cache dir. A call that compiled is one entry of the process's compile ledger (ledger.py: the
reason, the graphs, the seconds, the entry that would have served it) and of strict mode (strict_mode.py).
Records are appended as JSON lines to a local spool (`CACHEKEEPER_SPOOL`, default
`$CACHEKEEPER_HOME/spool`); `cachekeeper report` batches them into miss reports (reports/miss.py). The
serving process never talks to the store: a server needs no write access for this, and a full or
broken spool costs one warning, never a failed call (strict mode `fail` is the one error a call may get).
Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import settings
from ..format.spec import Shape
from ..format.spool import MAX_SPOOL_BYTES, SPOOL_SUFFIX, CallRecord
from ..reports.compiles import COMPILE_KEY, CompileInfo

if TYPE_CHECKING:
    from ..config import Config

log = logging.getLogger("cachekeeper.runtime")

# The cache dirs the built-in backends' runtimes write (what hydrate --print-env exports), by backend.
CACHE_ENV_OF = {"inductor": "TORCHINDUCTOR_CACHE_DIR", "neuron": "TORCH_NEURONX_NEFF_CACHE_DIR",
                "neuron_xla": "NEURON_COMPILE_CACHE_URL", "tpu": "TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT"}
CACHE_ENVS = tuple(CACHE_ENV_OF.values())


def spool_dir() -> Path:
    from ..stores import default_home

    return settings.SPOOL.get() or default_home() / "spool"


def cache_dirs_from_env(env: Mapping[str, str] | None = None) -> list[Path]:
    """The local cache dirs the runtime was pointed at (remote URLs are not dirs and are left out)."""
    env = os.environ if env is None else env
    return [Path(env[name]) for name in CACHE_ENVS if env.get(name) and "://" not in env[name]]


def cache_counts(dirs: Iterable[Path]) -> dict[str, int]:
    """Complete files per directory under the cache dirs (runtimes' temp names and locks are not compiled
    output). Counts, not name sets: a serving call pays one listing per directory, nothing kept per file."""
    from ..fs.paths import is_runtime_temp

    counts: dict[str, int] = {}
    stack = [str(d) for d in dirs]
    while stack:
        here = stack.pop()
        n = 0
        try:
            with os.scandir(here) as it:
                for entry in it:
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name != ".cachekeeper":   # hydrate's state, not the runtime's
                            stack.append(entry.path)
                    elif not is_runtime_temp(entry.name):
                        n += 1
        except OSError:
            continue   # not there (yet): the runtime creates it on its first compile
        counts[here] = n
    return counts


def new_files(before: Mapping[str, int], after: Mapping[str, int]) -> int:
    return sum(max(0, n - before.get(d, 0)) for d, n in after.items())


def call_arguments(pipe: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments that change a compiled graph. Height/width default as diffusers pipelines do
    (default_sample_size x vae_scale_factor); the batch is prompts x images per prompt."""
    height, width = kwargs.get("height"), kwargs.get("width")
    sample, scale = getattr(pipe, "default_sample_size", None), getattr(pipe, "vae_scale_factor", None)
    if isinstance(sample, int) and isinstance(scale, int):
        height = height if height is not None else sample * scale
        width = width if width is not None else sample * scale
    prompt = kwargs.get("prompt", args[0] if args else None)
    prompts = len(prompt) if isinstance(prompt, list | tuple) else 1
    per_prompt = kwargs.get("num_images_per_prompt") or 1
    guidance = kwargs.get("guidance_scale")
    max_len = kwargs.get("max_sequence_length")
    return {"height": int(height) if height is not None else None, "width": int(width) if width is not None else None,
            "batch": prompts * int(per_prompt), "guidance": float(guidance) if guidance is not None else None,
            "max_sequence_length": int(max_len) if max_len is not None else None}


class Spool:
    """Appends records to `<dir>/<host>-<pid>.jsonl`: one small O_APPEND write per record, so records of
    concurrent calls never interleave, and `cachekeeper report` can claim a file by renaming it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / f"{socket.gethostname()[:40]}-{os.getpid()}{SPOOL_SUFFIX}"
        self._warned = False

    def append(self, record: CallRecord, compiled: CompileInfo | None = None) -> None:
        """One line: the record, and for a call that compiled the ledger's `compile` object (reports/compiles.py)."""
        doc = asdict(record)
        if compiled is not None:
            doc[COMPILE_KEY] = compiled.to_dict()
        line = json.dumps(doc, sort_keys=True).encode() + b"\n"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                if os.fstat(fd).st_size + len(line) > MAX_SPOOL_BYTES:
                    raise OSError(f"spool file over {MAX_SPOOL_BYTES} bytes (is `cachekeeper report` running?)")
                os.write(fd, line)
            finally:
                os.close(fd)
        except OSError as exc:
            if not self._warned:   # the serving call must not fail, nor flood the log
                log.warning("cachekeeper: call not recorded in %s: %s", self.directory, exc)
                self._warned = True


def call_shape(arguments: Mapping[str, Any]) -> Shape | None:
    """The call's shape in the project's notation (height x width x batch), when it has a height and width."""
    height, width = arguments.get("height"), arguments.get("width")
    if not height or not width or not arguments.get("batch"):
        return None
    return Shape(int(height), int(width), int(arguments["batch"]))


class Watched:
    """The pipeline, with calls recorded; every other attribute is the pipeline's own."""

    def __init__(self, pipe: Any, model: str, cache_dirs: list[Path], spool: Spool,
                 counter: Callable[[], int | None] | None, matrix: Any = None) -> None:
        self.__dict__.update(_ck_pipe=pipe, _ck_model=model, _ck_dirs=cache_dirs, _ck_spool=spool,
                             _ck_counter=counter or (lambda: None), _ck_matrix=matrix)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_ck_pipe"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.__dict__["_ck_pipe"], name, value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from . import hooks, probe, strict_mode

        d = self.__dict__
        pipe, dirs = d["_ck_pipe"], d["_ck_dirs"]
        arguments = call_arguments(pipe, args, kwargs)
        call = strict_mode.Call(d["_ck_model"], arguments, call_shape(arguments), dirs, d["_ck_matrix"])
        strict_mode.check_hydrated(dirs, call.backend)
        hooks.ensure()
        before, count = probe.snapshot(dirs), d["_ck_counter"]()
        t0 = time.perf_counter()
        with strict_mode.watching(call):
            try:
                out = pipe(*args, **kwargs)
            except Exception as exc:
                refused = strict_mode.refusal_in(exc)
                if refused is None:
                    raise
                self._settle(call, before, count, t0)
                raise refused from None   # the one error, not the runtime's wrapping of it
        refused = self._settle(call, before, count, t0)
        if refused is not None:
            raise refused
        return out

    def _settle(self, call: Any, before: Any, count: int | None, t0: float) -> Any:
        """Spool the call (with the ledger's word when it compiled); the strict error to raise, if any."""
        from . import probe, strict_mode

        d = self.__dict__
        wall = time.perf_counter() - t0
        whole = probe.compiled(before, probe.snapshot(d["_ck_dirs"]))
        after = d["_ck_counter"]()
        if count is not None and after is not None and after > count and not whole.any:
            whole = dataclasses.replace(whole, graphs=after - count, source="runtime", seconds=wall)
        entry, refused = strict_mode.settle_call(call, whole)
        d["_ck_spool"].append(CallRecord(model=d["_ck_model"], **call.arguments, compiled=entry is not None,
                                         new_files=whole.new_files, wall_s=round(wall, 6), time=time.time()),
                              entry.info() if entry is not None else None)
        return refused


def watch(pipe: Any, *, model: str | None = None, cache_dirs: Iterable[str | os.PathLike[str]] | None = None,
          spool: str | os.PathLike[str] | None = None, counter: Callable[[], int | None] | None = None,
          config: Config | None = None) -> Watched:
    """Wrap `pipe` so each call is recorded for miss reports and the compile ledger. `model` is the config's
    model name (default: $CACHEKEEPER_MODEL, else the pipeline's class name); `cache_dirs` default to the dirs
    the backend env vars name (what `hydrate --print-env` exported); `counter` is one more compile count of a
    runtime the ledger does not read itself. `config` (`cachekeeper.config.load_config(path)`): its matrix, so
    the ledger and strict mode name the entry that would serve a call, and its `strict:` key
    (CACHEKEEPER_STRICT and strict() go over it)."""
    from . import strict_mode
    from .served import Matrix

    name = model or settings.MODEL.get() or type(pipe).__name__
    dirs = [Path(p) for p in cache_dirs] if cache_dirs is not None else cache_dirs_from_env()
    matrix = None
    if config is not None:
        strict_mode.from_config(config)
        matrix = Matrix.of(config)
    return Watched(pipe, name, dirs, Spool(Path(spool) if spool is not None else spool_dir()), counter, matrix)


__all__ = ["CallRecord", "Spool", "Watched", "call_arguments", "call_shape", "spool_dir", "watch"]
