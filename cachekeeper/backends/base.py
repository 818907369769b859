"""The contract between cachekeeper and one compiler backend (inductor, neuron, tpu).

A backend answers three questions without importing torch (the hydrate path calls them):
  * which toolchain is this host? (`fingerprint`, light probes only)
  * where does its cache live and which env var points there? (`env_var`, `extra_roots`)
  * which files of a cache dir are artifacts? (`include`)
and one with torch, in a subprocess the worker launches: compile this entry into this empty dir
(`build_command`, whose module runs in a fresh interpreter with crash isolation and a timeout).
"""

from __future__ import annotations

import abc
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ..errors import BackendUnavailable
from ..format.fingerprint import Fingerprint
from ..format.spec import EntrySpec, ModelRef, Shape

CACHE_ROOT = "cache"  # the root the backend's env var points at; every backend has it

# The backend plugin contract (docs/backends.md): every name a plugin needs, and only these are promised.
# Fingerprint, the specs and BackendUnavailable live in format/ and errors.py; plugins import them from here.
__all__ = ["CACHE_ROOT", "Backend", "BackendUnavailable", "BuildCommand", "BuildJob", "EntrySpec", "Fingerprint",
           "ModelRef", "Shape"]


@dataclass(frozen=True)
class BuildJob:
    """Everything a build subprocess needs, serialised to JSON on its command line."""

    spec: EntrySpec
    model: ModelRef
    roots: Mapping[str, str]         # root name -> empty directory to compile into ("cache", maybe more)
    options: Mapping[str, str] = field(default_factory=dict)   # backend options from the config
    result_path: str = ""            # where the subprocess writes its JSON result (stats, counters)

    def to_json(self) -> str:
        return json.dumps({"spec": self.spec.to_dict(), "model": self.model.to_dict(),
                           "roots": dict(self.roots), "options": dict(self.options),
                           "result_path": self.result_path})

    @classmethod
    def from_json(cls, text: str) -> BuildJob:
        d = json.loads(text)
        return cls(spec=EntrySpec.from_dict(d["spec"]), model=ModelRef(**d["model"]), roots=d["roots"],
                   options=d["options"], result_path=d["result_path"])


@dataclass(frozen=True)
class BuildCommand:
    argv: list[str]
    env: dict[str, str]              # full environment for the subprocess


class Backend(abc.ABC):
    name: ClassVar[str]
    env_var: ClassVar[str]           # points the runtime at the `cache` root
    # What the config planner asks a backend (defaults suit a plugin that declares nothing more):
    modes: ClassVar[tuple[str, ...]] = ("full",)            # compile modes it builds; "full" is everyone's
    # torch.compile `mode`s a server may pass (the matrix key `compile_modes`); "default" is everyone's and
    # adds nothing to an entry's key. A backend without others builds its entries once, whatever is listed.
    compile_modes: ClassVar[tuple[str, ...]] = ("default",)

    @classmethod
    def compile_modes_in(cls, mode: str) -> tuple[str, ...]:
        """The torch.compile modes an entry of compile mode `mode` may be built with (light: the config
        planner asks)."""
        return cls.compile_modes
    can_offload: ClassVar[bool] = True                       # runs a pipeline warm-up with CPU offload
    shared_roots: ClassVar[frozenset[str]] = frozenset()   # roots published once per toolchain
    # Roots whose files may name the root's own path where the runtime uses it (a kernel's absolute file
    # name): published with that path as a placeholder, which hydrate replaces by the dir it fills
    # (format/relocate.py). Their `build_roots` paths should be `format.relocate.RESERVED` bytes long.
    relocatable_roots: ClassVar[frozenset[str]] = frozenset()
    default_cache_dir: ClassVar[str | None] = None          # the runtime's own default when env_var is unset

    @abc.abstractmethod
    def fingerprint(self, options: Mapping[str, str]) -> Fingerprint:
        """This host's toolchain for this backend. Light: importlib.metadata, env, /proc, `cc -v`."""

    @abc.abstractmethod
    def unavailable_reason(self, options: Mapping[str, str] | None = None) -> str | None:
        """None if this host can build/hydrate for the backend (with these options), else why not."""

    def mode_key_options(self, mode: str, *, pipeline: bool = False) -> dict[str, str]:
        """Entry-key options a compile mode adds beyond the model's own (e.g. the library versions a
        precompiled function embeds); `pipeline`: the entry warms up the whole pipeline. Light: the config
        planner calls it on every host, hydrate included."""
        return {}

    def device_reason(self, options: Mapping[str, str]) -> str | None:
        """None if this host has the device that builds and servers run on, else why not (doctor reports it;
        hydrate needs no device). Light probes only."""
        return None

    def build_roots(self, workdir: Path) -> dict[str, Path]:
        """Fresh directories a build compiles into, by root name; the worker snapshots each one."""
        return {CACHE_ROOT: workdir / CACHE_ROOT}

    def env_warnings(self, options: Mapping[str, str]) -> list[str]:
        """Env settings that would leave a hydrated dir unused (reported by `doctor`)."""
        return []

    def extra_roots(self, options: Mapping[str, str]) -> dict[str, Path]:
        """Directories other than the cache dir that hydrate fills (e.g. Inductor's PCH dir)."""
        return {}

    def include(self, root: str, relpath: str, path: Path) -> bool:
        """Whether a file found in a built root is an artifact worth publishing (skip locks, temps).

        `path` is the file itself, for rules that need the disk (empty files, completion markers)."""
        return True

    def env_exports(self, dest: Path) -> dict[str, str]:
        """What a boot hook exports so the runtime reads the hydrated dir."""
        return {self.env_var: str(dest)}

    @abc.abstractmethod
    def build_command(self, job: BuildJob) -> BuildCommand:
        """The subprocess that compiles `job` into `job.roots` (the worker runs and times it)."""

    # build.workers: parallel builds on one host each get their own devices ----------------------

    device_unit: ClassVar[str] = "device"

    def build_devices(self, options: Mapping[str, str]) -> int | None:
        """How many devices parallel builds can split between them here; None: builds share the host
        (CPU), so `build.workers` needs no partition."""
        return None

    def device_env(self, ids: Sequence[int]) -> dict[str, str]:
        """Env that restricts one build subprocess to the devices `ids` (sorted, contiguous)."""
        return {}

    # helpers for subclasses -----------------------------------------------------------------------

    @staticmethod
    def python_module_command(module: str, job: BuildJob, env: Mapping[str, str]) -> BuildCommand:
        full_env = dict(os.environ)
        full_env.update(env)
        return BuildCommand([sys.executable, "-m", module, job.to_json()], full_env)
