"""The XLA-era torch-neuronx persistent cache (NEURON_COMPILE_CACHE_URL), which many teams still run.

Layout: `<root>/neuronxcc-<compiler version>[+<commit>]/MODULE_<hlo hash>+<flags hash>/` holding `model.neff`, the
`model.done` marker written last, and companions (`model.hlo_module.pb`, `compile_flags.json`, ...).
A module dir without `model.done` is partial (a compile died or is running) and never travels. The
compiler version is the dir name, so our fingerprint's `neuronx_cc` field must equal it: a dir of another
version is neither published nor hydrated.

Builds do not compile: an existing cache dir is imported (`import_xla_cache`). A config entry for this
backend points its model `path` (or the backend option `import_from`) at that dir, and the build copies
its complete modules of this host's compiler version into the fresh root:

    python -m cachekeeper.backends.neuron_xla.build '<BuildJob json>'

Fingerprint fields: neuronx_cc (version), option.* (e.g. `target`, for labelling). The module key itself
covers the HLO and the compiler flags.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import ClassVar

from ...errors import BuildFailed
from ...format.fingerprint import Fingerprint
from ..base import CACHE_ROOT, Backend, BuildCommand, BuildJob
from ..toolchain import PackagedBackend
from . import probes

DISTS = ("neuronx-cc",)
INSTALL_HINT = "pip install neuronx-cc from the Neuron pip repository"
DEFAULT_CACHE_DIR = "/var/tmp/neuron-compile-cache"
BUILD_MODULE = "cachekeeper.backends.neuron_xla.build"
MODULE_PREFIX = "MODULE_"
DONE = "model.done"
NEFF = "model.neff"
# Never copied: compile locks, and temp files of an interrupted write.
_SKIP_SUFFIXES = (".lock", ".tmp", ".ck-tmp")


def is_complete(module: Path) -> bool:
    """A module the runtime would load: the done marker and a non-empty NEFF."""
    neff = module / NEFF
    return (module / DONE).is_file() and neff.is_file() and neff.stat().st_size > 0


def travels(name: str) -> bool:
    return not name.endswith(_SKIP_SUFFIXES) and not name.startswith(".tmp")


class NeuronXlaBackend(PackagedBackend):
    dists: ClassVar[tuple[str, ...]] = DISTS
    install_hint: ClassVar[str] = INSTALL_HINT
    name: ClassVar[str] = "neuron_xla"
    env_var: ClassVar[str] = "NEURON_COMPILE_CACHE_URL"
    modes: ClassVar[tuple[str, ...]] = ("full",)
    can_offload: ClassVar[bool] = False  # its graphs live on the device: no CPU offload
    default_cache_dir: ClassVar[str | None] = DEFAULT_CACHE_DIR

    def fingerprint(self, options: Mapping[str, str]) -> Fingerprint:
        versions = self.versions(options)
        return Fingerprint.of(self.name, {"neuronx_cc": versions["neuronx-cc"], **self.option_fields(options)})

    def env_warnings(self, options: Mapping[str, str]) -> list[str]:
        out = []
        url = self.env.get(self.env_var, "")
        if url.startswith("s3://"):
            out.append(f"{self.env_var}={url}: hydrate fills a local dir; point the runtime at it instead")
        flags = self.env.get("NEURON_CC_FLAGS", "")
        if "--cache_dir" in flags or "--no-cache" in flags:
            out.append(f"NEURON_CC_FLAGS={flags!r} overrides {self.env_var}: the hydrated dir may be ignored")
        return out

    def include(self, root: str, relpath: str, path: Path) -> bool:
        parts = PurePosixPath(relpath).parts
        if root != CACHE_ROOT or len(parts) != 3 or not travels(parts[2]):
            return False
        version = probes.compiler_version()
        if version is None or not probes.is_version_dir(parts[0], version) or not parts[1].startswith(MODULE_PREFIX):
            return False
        # Whether a module is complete can only be seen on disk: its `model.done` marker.
        return is_complete(path.parent)

    def build_command(self, job: BuildJob) -> BuildCommand:
        self.versions(job.options)
        if not (job.options.get("import_from") or job.model.path):
            raise BuildFailed(f"neuron_xla: {job.model.name} names no cache dir to import",
                              "set the model's path (or backend_options.neuron_xla.import_from) to the cache dir")
        return Backend.python_module_command(BUILD_MODULE, job, {})

