"""What a serving process served and what it cost, recorded by one line: `pipe = watch(pipe)`.

    from cachekeeper.runtime import watch
    pipe = watch(pipe, model="flux")          # the config's model name (or CACHEKEEPER_MODEL)
    image = pipe(prompt, height=768, width=1360).images[0]

Per call it records the arguments that change a compiled graph (height, width, images per prompt,
guidance scale, max sequence length), whether the call compiled anything (new files in the backend's
cache dir, plus Inductor's own FX-graph-cache miss counter when torch is loaded) and the wall time.
Records are appended as JSON lines to a local spool (`CACHEKEEPER_SPOOL`, default
`$CACHEKEEPER_HOME/spool`); `cachekeeper report` batches them into miss reports (reports.py). The
serving process never talks to the store: a server needs no write access for this, and a full or
broken spool costs one warning, never a failed call. Nothing here imports torch.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .. import settings
from ..format.spool import MAX_SPOOL_BYTES, SPOOL_SUFFIX, CallRecord

log = logging.getLogger("cachekeeper.runtime")

# The cache dirs the built-in backends' runtimes write (what hydrate --print-env exports).
CACHE_ENVS = ("TORCHINDUCTOR_CACHE_DIR", "TORCH_NEURONX_NEFF_CACHE_DIR", "NEURON_COMPILE_CACHE_URL",
              "TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT")


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


def inductor_compiles() -> int | None:
    """Inductor's FX-graph-cache misses so far (a real compile each), when torch is already loaded."""
    dynamo = sys.modules.get("torch._dynamo.utils")
    counters = getattr(dynamo, "counters", None)
    return None if counters is None else int(counters["inductor"]["fxgraph_cache_miss"])


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

    def append(self, record: CallRecord) -> None:
        line = json.dumps(asdict(record), sort_keys=True).encode() + b"\n"
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


class Watched:
    """The pipeline, with calls recorded; every other attribute is the pipeline's own."""

    def __init__(self, pipe: Any, model: str, cache_dirs: list[Path], spool: Spool,
                 counter: Callable[[], int | None]) -> None:
        self.__dict__.update(_ck_pipe=pipe, _ck_model=model, _ck_dirs=cache_dirs, _ck_spool=spool,
                             _ck_counter=counter)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_ck_pipe"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.__dict__["_ck_pipe"], name, value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        d = self.__dict__
        pipe, dirs, counter = d["_ck_pipe"], d["_ck_dirs"], d["_ck_counter"]
        before, compiles = cache_counts(dirs), counter()
        t0 = time.perf_counter()
        out = pipe(*args, **kwargs)
        wall = time.perf_counter() - t0
        added = new_files(before, cache_counts(dirs))
        after = counter()
        by_counter = compiles is not None and after is not None and after > compiles
        d["_ck_spool"].append(CallRecord(model=d["_ck_model"], **call_arguments(pipe, args, kwargs),
                                         compiled=added > 0 or by_counter, new_files=added,
                                         wall_s=round(wall, 6), time=time.time()))
        return out


def watch(pipe: Any, *, model: str | None = None, cache_dirs: Iterable[str | os.PathLike[str]] | None = None,
          spool: str | os.PathLike[str] | None = None, counter: Callable[[], int | None] | None = None) -> Watched:
    """Wrap `pipe` so each call is recorded for miss reports. `model` is the config's model name
    (default: $CACHEKEEPER_MODEL, else the pipeline's class name); `cache_dirs` default to the dirs the
    backend env vars name (what `hydrate --print-env` exported); `counter` is a runtime's compile count."""
    name = model or settings.MODEL.get() or type(pipe).__name__
    dirs = [Path(p) for p in cache_dirs] if cache_dirs is not None else cache_dirs_from_env()
    return Watched(pipe, name, dirs, Spool(Path(spool) if spool is not None else spool_dir()),
                   counter or inductor_compiles)


__all__ = ["CallRecord", "Spool", "Watched", "call_arguments", "spool_dir", "watch"]
