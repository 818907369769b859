"""Import an existing XLA-era cache dir into the job's root (a subprocess the worker launches):

    python -m cachekeeper.backends.neuron_xla.build '<BuildJob json>'

Nothing compiles: the complete modules of this host's neuronx-cc version are copied (temp + rename per
file, the done marker last) from the model's `path` (or the option `import_from`) into the fresh root.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import BuildFailed
from ...fs.paths import temp_path
from ..base import CACHE_ROOT, BuildJob
from ..build_main import build_main
from ..toolchain import require_versions
from .backend import BUILD_MODULE, DISTS, DONE, INSTALL_HINT, MODULE_PREFIX, is_complete, travels
from .probes import is_version_dir


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
    dirs = sorted(d for d in src.iterdir() if d.is_dir() and d.name.startswith("neuronxcc-"))
    report.other_versions = [d.name for d in dirs if not is_version_dir(d.name, compiler_version)]
    for base in (d for d in dirs if is_version_dir(d.name, compiler_version)):
        for module in sorted(d for d in base.iterdir() if d.is_dir() and d.name.startswith(MODULE_PREFIX)):
            wanted = base.name
            if not is_complete(module):
                report.partial.append(f"{wanted}/{module.name}")
                continue
            names = sorted((f.name for f in module.iterdir() if f.is_file() and travels(f.name)),
                           key=lambda n: n == DONE)  # the marker last
            for name in names:
                rel = f"{wanted}/{module.name}/{name}"
                _copy_atomic(module / name, dest / rel)
                report.copied.append(rel)
    return report


def _copy_atomic(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(dst)
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


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
    sys.exit(build_main(sys.argv[1:], BUILD_MODULE, build))
