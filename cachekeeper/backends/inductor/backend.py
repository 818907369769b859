"""PyTorch Inductor (CPU/CUDA): the fingerprint its own cache key lacks, its two roots, its build.

Roots:
  * "cache": TORCHINDUCTOR_CACHE_DIR (fxgraph/, aotautograd/, compiled kernels, triton/ on GPU). A build's
             path is padded to `relocate.RESERVED` bytes and published relocatable (format/relocate.py):
             hydrate writes the served dir into the files that name it (Triton `filename`, `__grp__`).
             On CUDA it also holds the other JIT caches a server fills (`JIT_CACHES`), each exported.
  * "pch":   the precompiled C++ header dir, $TMPDIR/torchinductor_<user>/precompiled_headers (~155 MB,
             one per compiler and flags). Without it a full cache hit still rebuilds the header (warm first
             call 10-13 s instead of 4.5-7 s), so it is published once per toolchain (shared root).

Importing this module does not import torch (the hydrate path uses it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import ClassVar

from ... import bounds
from ...errors import BackendUnavailable, ConfigError, DestinationError
from ...format import relocate
from ...format.fingerprint import Fingerprint
from ..base import CACHE_ROOT, BuildCommand, BuildJob
from ..toolchain import PackagedBackend, add_build_warning, dist_version, unwritable
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

# The JIT caches a CUDA server fills besides Inductor's own, each kept inside the cache root so a build
# fills it there (the build sets the variable) and hydrate places it; `env_exports` points the server at
# it. (variable, dir under the cache root). docs/backends.md, "Every JIT cache a CUDA server fills".
TRITON_CACHE = ("TRITON_CACHE_DIR", "triton/0")              # Inductor's own default for device 0
KERNEL_CACHE = ("PYTORCH_KERNEL_CACHE_PATH", "torch-kernels")  # NVRTC jiterator kernels
DRIVER_CACHE = ("CUDA_CACHE_PATH", "cuda-cache")             # + /<driver version>: a driver upgrade voids it
JIT_CACHES = (TRITON_CACHE, KERNEL_CACHE, DRIVER_CACHE)
# Host settings that turn those caches off: a build drops them (it exists to fill them), with a warning.
JIT_CACHE_OFF = {"USE_PYTORCH_KERNEL_CACHE": "0", "CUDA_CACHE_DISABLE": "1"}
COMPILE_THREADS_ENV = "TORCHINDUCTOR_COMPILE_THREADS"
SERVE_THREADS = "serve_compile_threads"   # backend option: what `env_exports` sets COMPILE_THREADS_ENV to
_DRIVER = re.compile(r"\d+(?:\.\d+)*|unknown")


def jit_cache_env(cache: Path, driver: str) -> dict[str, str]:
    """Each JIT cache's variable, pointed into the cache root `cache` (a build's, or a served dir)."""
    driver = driver if _DRIVER.fullmatch(driver) else "unknown"
    return {TRITON_CACHE[0]: str(cache / TRITON_CACHE[1]), KERNEL_CACHE[0]: str(cache / KERNEL_CACHE[1]),
            DRIVER_CACHE[0]: str(cache / DRIVER_CACHE[1] / driver)}


def relocatable_root(workdir: Path) -> Path:
    """`workdir/cache`, its name padded so the path is `relocate.RESERVED` bytes: published files name it
    as a placeholder that long, and hydrate can write any served dir up to that length in its place. A
    workdir too long for that keeps `cache` (its own length is then the served dir's limit)."""
    base = Path(os.path.abspath(workdir))
    room = relocate.RESERVED - len(os.fsencode(str(base))) - 1
    return base / ("cache" + "_" * (room - 5) if room > 5 else "cache")


class InductorBackend(PackagedBackend):
    name: ClassVar[str] = "inductor"
    env_var: ClassVar[str] = "TORCHINDUCTOR_CACHE_DIR"
    modes: ClassVar[tuple[str, ...]] = ("full", "repeated_blocks", "aot")
    # torch.compile's modes (torch/__init__.py `compile`; Inductor's list_mode_options): a server's own
    # `mode=` is a matrix option (`compile_modes`), so the build compiles (and autotunes) as it will.
    compile_modes: ClassVar[tuple[str, ...]] = ("default", "reduce-overhead", "max-autotune",
                                                "max-autotune-no-cudagraphs")
    # Inductor's own default, $TMPDIR/torchinductor_$USER (as the runtime computes it), for `doctor`.
    default_cache_dir: ClassVar[str | None] = str(probes.default_pch_dir().parent)
    shared_roots: ClassVar[frozenset[str]] = frozenset({PCH_ROOT})
    relocatable_roots: ClassVar[frozenset[str]] = frozenset({CACHE_ROOT})
    # torch is the one distribution every fingerprint records; a config may pin others (diffusers_version,
    # pytorch_triton_version): PackagedBackend checks every pin.
    dists: ClassVar[tuple[str, ...]] = ("torch",)
    install_hint: ClassVar[str] = "pip install torch"
    # A location, and what a server's env gets: neither changes compiled bytes, so neither is a field.
    field_options: ClassVar[frozenset[str]] = frozenset({"pch_dir", SERVE_THREADS})

    @classmethod
    def compile_modes_in(cls, mode: str) -> tuple[str, ...]:
        # An aot function compiles with backend_options.inductor.mode (aot.py), never an entry's own.
        return ("default",) if mode == "aot" else cls.compile_modes

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
        serve_threads(options)
        self._options = dict(options)   # what `env_exports` exports for (hydrate computes this first)
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
        return {CACHE_ROOT: relocatable_root(workdir),
                PCH_ROOT: probes.default_pch_dir(os.path.join(os.path.abspath(workdir), "tmp"))}

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

    def env_exports(self, dest: Path) -> dict[str, str]:
        """The cache dir; on CUDA each JIT cache in it (`JIT_CACHES`); with `serve_compile_threads`, the
        server's compile workers. Refused: a dir the server cannot write (Inductor and Triton write into it
        on every load) or one longer than the relocatable files reserve for it."""
        if len(os.fsencode(str(dest))) > relocate.RESERVED:
            raise DestinationError(f"inductor: {dest} is {len(os.fsencode(str(dest)))} bytes long; prebuilt cache "
                                   f"files reserve {relocate.RESERVED} for the dir they are served from",
                                   f"hydrate into a dest of at most {relocate.RESERVED - 17} bytes (the "
                                   "toolchain's dir adds /<16 hex>)", path=str(dest))
        if (blocked := unwritable(dest)) is not None:
            raise DestinationError(f"inductor: {dest} is not writable ({blocked}): Inductor writes its locks and "
                                   "Triton its kernel groups into the served dir on every load",
                                   "serve from a dir the server's user can write (not a read-only mount)",
                                   path=str(dest))
        options = getattr(self, "_options", {})
        out = {self.env_var: str(dest)}
        if options.get("device", "cpu").startswith("cuda"):
            out.update(jit_cache_env(dest, probes.driver_version()))
            if (theirs := self.env.get(TRITON_CACHE[0])) and theirs != out[TRITON_CACHE[0]]:
                from ...observability import logs

                logs.warning(triton_dir_warning(theirs, out[TRITON_CACHE[0]]))
        if (threads := serve_threads(options)) is not None:
            out[COMPILE_THREADS_ENV] = str(threads)
        return out

    def env_warnings(self, options: Mapping[str, str]) -> list[str]:
        theirs = self.env.get(TRITON_CACHE[0])
        if theirs and options.get("device", "cpu").startswith("cuda") \
                and not theirs.rstrip("/").endswith("/" + TRITON_CACHE[1]):
            return [triton_dir_warning(theirs, f"<hydrated dir>/{TRITON_CACHE[1]}")]
        return []

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
        cuda = job.options.get("device", "cpu").startswith("cuda")
        if cuda:   # every JIT cache the build fills lands in the cache root, captured with it
            env.update(jit_cache_env(cache, probes.driver_version()))
        cmd = self.python_module_command(BUILD_MODULE, job, env)
        dropped = [var for var, off in JIT_CACHE_OFF.items() if cuda and cmd.env.get(var) == off]
        for var in dropped:
            del cmd.env[var]
        if dropped:
            add_build_warning(cmd.env, f"inductor: the build drops {', '.join(dropped)} (a build fills the JIT "
                              "caches a server reads)")
        return cmd

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


def serve_threads(options: Mapping[str, str]) -> int | None:
    """`serve_compile_threads`, checked where it enters (the config, `--option`, the API's options)."""
    raw = options.get(SERVE_THREADS)
    if raw is None:
        return None
    return int(bounds.checked(raw, bounds.COMPILE_THREADS, f"backend_options.inductor.{SERVE_THREADS}",
                              ConfigError))


def triton_dir_warning(theirs: str, ours: str) -> str:
    return (f"TRITON_CACHE_DIR={theirs} is set here, not the hydrated {ours}: the env hydrate prints (and "
            "`cachekeeper env`) points it there, so a server started with those exports loads the prebuilt "
            f"Triton kernels; one that keeps {theirs} compiles them again")
