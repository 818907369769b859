"""PyTorch Inductor (CPU/CUDA): the fingerprint its own cache key lacks, its two roots, its build.

Roots:
  * "cache": TORCHINDUCTOR_CACHE_DIR (fxgraph/, aotautograd/, compiled kernels, triton/ on GPU).
  * "pch":   the precompiled C++ header dir, $TMPDIR/torchinductor_<user>/precompiled_headers (~155 MB,
             one per compiler and flags). Without it a full cache hit still rebuilds the header (warm first
             call 10-13 s instead of 4.5-7 s), so it is published once per toolchain (shared root).

Importing this module does not import torch (the hydrate path uses it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import ClassVar

from ...errors import BackendUnavailable
from ...format.fingerprint import Fingerprint
from ..base import CACHE_ROOT, BuildCommand, BuildJob
from ..toolchain import PackagedBackend, dist_version
from . import probes

PCH_ROOT = "pch"
BUILD_MODULE = "cachekeeper.backends.inductor.build"

# Files no other process should receive (seen in real cache dirs of torch 2.13 CPU builds, plus the
# writers' temp names from the torch/triton sources): lock files (`locks/`, `*.lock`), temp files of an
# interrupted write (Inductor's `.<pid>.<tid>.tmp`, tempfile's `tmpXXXXXXXX`, ours `*.ck-tmp`), the
# per-build scratch dir of a crashed g++ run (`<name>_CxxBuild/`), Triton's staging dirs (`tmp.pid_*/`)
# and Python bytecode caches (rebuilt on import).
_SKIP_DIRS = frozenset({"locks", "__pycache__"})
_SKIP_DIR_PATTERN = re.compile(r"(.*_CxxBuild|tmp\.pid_.*)")
_SKIP_NAME_PATTERN = re.compile(r"(.*\.(lock|tmp|ck-tmp|pyc)|tmp[a-z0-9_]{8})")


class InductorBackend(PackagedBackend):
    name: ClassVar[str] = "inductor"
    env_var: ClassVar[str] = "TORCHINDUCTOR_CACHE_DIR"
    modes: ClassVar[tuple[str, ...]] = ("full", "repeated_blocks", "aot")
    # Inductor's own default, $TMPDIR/torchinductor_$USER (as the runtime computes it), for `doctor`.
    default_cache_dir: ClassVar[str | None] = str(probes.default_pch_dir().parent)
    shared_roots: ClassVar[frozenset[str]] = frozenset({PCH_ROOT})
    # torch is the one distribution every fingerprint records; a config may pin others (diffusers_version,
    # pytorch_triton_version): PackagedBackend checks every pin.
    dists: ClassVar[tuple[str, ...]] = ("torch",)
    install_hint: ClassVar[str] = "pip install torch"
    field_options: ClassVar[frozenset[str]] = frozenset({"pch_dir"})   # a location, not a field

    def mode_key_options(self, mode: str, *, pipeline: bool = False) -> dict[str, str]:
        """An `aot` function embeds the model's bytecode, so the installed diffusers build is part of what
        it is for; one captured from a pipeline call also depends on transformers (the text encoders)."""
        from . import aot  # light at its top; imported here so the other modes never load it

        return dict(aot.key_options(pipeline=pipeline)) if mode == aot.MODE else {}

    # --- fingerprint -------------------------------------------------------------------------------

    def fingerprint(self, options: Mapping[str, str]) -> Fingerprint:
        reason = self.unavailable_reason(options)
        if reason is not None:
            raise BackendUnavailable.of("inductor", reason)
        env = self.env
        device = options.get("device", "cpu")
        cxx = probes.cxx_path(env)
        assert cxx is not None  # unavailable_reason checked it
        fields = self.version_fields(options)  # torch; `*_version` pins are checked, never fields
        fields.update({
            "torch_path": probes.torch_origin() or "",
            "python": probes.python_version(),
            "device": device,
            "cpu_isa": probes.cpu_isa(env),
            "omp_threads": probes.omp_threads(env),
            "cxx": cxx,
            "cxx_id": probes.cxx_identity(cxx),
        })
        if device.startswith("cuda"):
            fields.update(self._cuda_fields())
        fields.update({f"env.{k}": v for k, v in probes.output_env(env).items()})
        fields.update(self.option_fields(options))
        return Fingerprint.of(self.name, fields)

    @staticmethod
    def _cuda_fields() -> dict[str, str]:
        gpu = probes.nvidia_smi()
        if gpu is None:
            raise BackendUnavailable.of("inductor", "device cuda requested but nvidia-smi reports no GPU")
        return {"gpu": gpu[0], "gpu_cc": gpu[1], "cuda": probes.torch_cuda_version(),
                "triton": probes.triton_version()}

    def unavailable_reason(self, options: Mapping[str, str] | None = None) -> str | None:
        if dist_version("torch") is None or probes.torch_origin() is None:
            return "torch is not installed"
        if probes.cxx_path(self.env) is None:
            return f"no C++ compiler: {probes.cxx_name(self.env)!r} not found (set CXX or install g++)"
        if (options or {}).get("device", "cpu").startswith("cuda"):
            if probes.torch_cuda_version() == "none":
                return f"device cuda requested but torch {dist_version('torch')} is a CPU-only build"
            if probes.nvidia_smi() is None:
                return "device cuda requested but nvidia-smi is missing or sees no GPU"
        return None

    # --- roots -------------------------------------------------------------------------------------

    def build_roots(self, workdir: Path) -> dict[str, Path]:
        # The build runs with TMPDIR=workdir/tmp, so Inductor writes its header under it.
        return {CACHE_ROOT: workdir / CACHE_ROOT, PCH_ROOT: probes.default_pch_dir(str(workdir / "tmp"))}

    def extra_roots(self, options: Mapping[str, str]) -> dict[str, Path]:
        # Where the serving process will look: its $TMPDIR, unless the config names the dir.
        pch_dir = options.get("pch_dir")
        return {PCH_ROOT: Path(pch_dir) if pch_dir else probes.default_pch_dir(self.env.get("TMPDIR"))}

    def include(self, root: str, relpath: str, path: Path) -> bool:
        *dirs, name = PurePosixPath(relpath).parts or ("",)
        if any(d in _SKIP_DIRS or _SKIP_DIR_PATTERN.fullmatch(d) for d in dirs):
            return False
        if _SKIP_NAME_PATTERN.fullmatch(name):
            return False
        if root == PCH_ROOT:
            # Only headers and their compiled form (the .gch is used only next to its .h).
            return name.endswith((".h", ".h.gch"))
        return True

    # --- build -------------------------------------------------------------------------------------

    def build_command(self, job: BuildJob) -> BuildCommand:
        cache = Path(job.roots[CACHE_ROOT])
        pch = job.roots.get(PCH_ROOT)
        # The pch root is <tmp>/torchinductor_<user>/precompiled_headers: TMPDIR is two levels up.
        tmpdir = Path(pch).parent.parent if pch else cache.parent / "tmp"
        env = {
            self.env_var: str(cache),
            "TMPDIR": str(tmpdir),
            "TORCHINDUCTOR_FX_GRAPH_CACHE": "1",
            "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
        }
        return self.python_module_command(BUILD_MODULE, job, env)

    # build.workers on CUDA: one GPU range per build (CPU builds share the host, no partition).
    device_unit: ClassVar[str] = "GPU"

    def build_devices(self, options: Mapping[str, str]) -> int | None:
        if not options.get("device", "cpu").startswith("cuda"):
            return None
        visible = self.env.get("CUDA_VISIBLE_DEVICES")
        if visible is not None:
            return len([d for d in visible.split(",") if d.strip()])
        return probes.gpu_count()

    def device_env(self, ids: Sequence[int]) -> dict[str, str]:
        # Ids count the GPUs this worker sees: map them through its own CUDA_VISIBLE_DEVICES, if any.
        visible = [d.strip() for d in self.env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        return {"CUDA_VISIBLE_DEVICES": ",".join(visible[i] if visible else str(i) for i in ids)} if ids else {}
