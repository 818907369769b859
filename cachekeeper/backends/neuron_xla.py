"""The XLA-era torch-neuronx persistent cache (NEURON_COMPILE_CACHE_URL), which many teams still run.

Layout: `<root>/neuronxcc-<compiler version>/MODULE_<hlo hash>+<flags hash>/` holding `model.neff`, the
`model.done` marker written last, and companions (`model.hlo_module.pb`, `compile_flags.json`, ...).
A module dir without `model.done` is partial (a compile died or is running) and never travels. The
compiler version is the dir name, so our fingerprint's `neuronx_cc` field must equal it: a dir of another
version is neither published nor hydrated.

Builds do not compile: an existing cache dir is imported (`import_xla_cache`). A config entry for this
backend points its model `path` (or the backend option `import_from`) at that dir, and the build copies
its complete modules of this host's compiler version into the fresh root:

    python -m cachekeeper.backends.neuron_xla '<BuildJob json>'

Fingerprint fields: neuronx_cc (version), option.* (e.g. `target`, for labelling). The module key itself
covers the HLO and the compiler flags.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from ..errors import BuildFailed
from ..fingerprint import Fingerprint
from . import MODES
from ._common import (
    PackagedBackend,
    build_main,
    dist_version,
    option_fields,
    require_versions,
)
from .base import CACHE_ROOT, Backend, BuildCommand, BuildJob

DISTS = ("neuronx-cc",)
INSTALL_HINT = "pip install neuronx-cc from the Neuron pip repository"
DEFAULT_CACHE_DIR = "/var/tmp/neuron-compile-cache"
MODULE_PREFIX = "MODULE_"
DONE = "model.done"
NEFF = "model.neff"
# Never copied: compile locks, and temp files of an interrupted write.
_SKIP_SUFFIXES = (".lock", ".tmp", ".ck-tmp")


def version_dir(compiler_version: str) -> str:
    return f"neuronxcc-{compiler_version}"


def is_complete(module: Path) -> bool:
    """A module the runtime would load: the done marker and a non-empty NEFF."""
    neff = module / NEFF
    return (module / DONE).is_file() and neff.is_file() and neff.stat().st_size > 0


def _travels(name: str) -> bool:
    return not name.endswith(_SKIP_SUFFIXES) and not name.startswith(".tmp")


@dataclass
class ImportReport:
    copied: list[str] = field(default_factory=list)          # relpaths under the destination root
    partial: list[str] = field(default_factory=list)         # module dirs skipped: no model.done
    other_versions: list[str] = field(default_factory=list)  # neuronxcc-* dirs of other compilers


def import_xla_cache(src: Path, dest: Path, compiler_version: str) -> ImportReport:
    """Copy the complete modules of `compiler_version` from an existing cache dir into `dest` (temp +
    rename per file, done marker last, so `dest` never shows a module as complete before its NEFF)."""
    if not src.is_dir():
        raise BuildFailed(f"neuron_xla: {src} is not a directory",
                          "point the entry's path (or import_from) at a local NEURON_COMPILE_CACHE_URL dir")
    report = ImportReport()
    wanted = version_dir(compiler_version)
    report.other_versions = sorted(d.name for d in src.iterdir() if d.is_dir() and d.name.startswith("neuronxcc-")
                                   and d.name != wanted)
    base = src / wanted
    modules = sorted(d for d in base.iterdir() if d.is_dir() and d.name.startswith(MODULE_PREFIX)) \
        if base.is_dir() else []
    for module in modules:
        if not is_complete(module):
            report.partial.append(f"{wanted}/{module.name}")
            continue
        names = sorted((f.name for f in module.iterdir() if f.is_file() and _travels(f.name)),
                       key=lambda n: n == DONE)  # the marker last
        for name in names:
            rel = f"{wanted}/{module.name}/{name}"
            _copy_atomic(module / name, dest / rel)
            report.copied.append(rel)
    return report


def _copy_atomic(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.ck-tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


class NeuronXlaBackend(PackagedBackend):
    dists: ClassVar[tuple[str, ...]] = DISTS
    install_hint: ClassVar[str] = INSTALL_HINT
    name: ClassVar[str] = "neuron_xla"
    env_var: ClassVar[str] = "NEURON_COMPILE_CACHE_URL"
    modes: ClassVar[tuple[str, ...]] = MODES["neuron_xla"]
    default_cache_dir: ClassVar[str | None] = DEFAULT_CACHE_DIR

    def fingerprint(self, options: Mapping[str, str]) -> Fingerprint:
        versions = self.versions(options)
        return Fingerprint.of(self.name, {"neuronx_cc": versions["neuronx-cc"],
                                          **option_fields(options, frozenset())})

    def env_warnings(self, options: Mapping[str, str]) -> list[str]:
        out = []
        url = os.environ.get(self.env_var, "")
        if url.startswith("s3://"):
            out.append(f"{self.env_var}={url}: hydrate fills a local dir; point the runtime at it instead")
        flags = os.environ.get("NEURON_CC_FLAGS", "")
        if "--cache_dir" in flags or "--no-cache" in flags:
            out.append(f"NEURON_CC_FLAGS={flags!r} overrides {self.env_var}: the hydrated dir may be ignored")
        return out

    def include(self, root: str, relpath: str, path: Path) -> bool:
        parts = PurePosixPath(relpath).parts
        if root != CACHE_ROOT or len(parts) != 3 or not _travels(parts[2]):
            return False
        version = dist_version("neuronx-cc")
        if version is None or parts[0] != version_dir(version) or not parts[1].startswith(MODULE_PREFIX):
            return False
        # Whether a module is complete can only be seen on disk: its `model.done` marker.
        return is_complete(path.parent)

    def build_command(self, job: BuildJob) -> BuildCommand:
        self.versions(job.options)
        if not (job.options.get("import_from") or job.model.path):
            raise BuildFailed(f"neuron_xla: {job.model.name} names no cache dir to import",
                              "set the model's path (or backend_options.neuron_xla.import_from) to the cache dir")
        return Backend.python_module_command("cachekeeper.backends.neuron_xla", job, {})


def build(job: BuildJob) -> dict[str, Any]:
    version = require_versions("neuron_xla", DISTS, INSTALL_HINT)["neuronx-cc"]
    src = Path(job.options.get("import_from") or job.model.path or "")
    report = import_xla_cache(src, Path(job.roots[CACHE_ROOT]), version)
    if not report.copied:
        raise BuildFailed(f"neuron_xla: {src} has no complete module for neuronx-cc {version}"
                          + (f" (it has {', '.join(report.other_versions)})" if report.other_versions else ""))
    modules = len({rel.rsplit("/", 1)[0] for rel in report.copied})
    return {"ok": True, "entry": job.spec.key, "backend": "neuron_xla", "source": str(src),
            "counters": {"compiled": 0, "imported_modules": modules, "skipped_partial": len(report.partial)},
            "skipped_other_versions": report.other_versions}


if __name__ == "__main__":
    sys.exit(build_main(sys.argv[1:], "cachekeeper.backends.neuron_xla", build))
