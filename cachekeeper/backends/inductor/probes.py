"""Light probes of the host for the Inductor fingerprint. No torch import: metadata, env, /proc, `$CXX -v`.

Each probe mirrors what Inductor itself would decide (which compiler, which vector ISA, which cache dir)
so the fingerprint separates exactly the hosts whose compiled bytes differ.
"""

from __future__ import annotations

import functools
import getpass
import hashlib
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from ..toolchain import dist_version

# TORCHINDUCTOR_* / TORCH_COMPILE_* variables that cannot change compiled output: where caches live,
# whether they are used, parallelism of the compile itself, timeouts, logging and profiling sinks.
# Everything else with those prefixes goes into the fingerprint (an unknown variable costs a spurious
# miss, never a wrong hit).
ENV_PREFIXES = ("TORCHINDUCTOR_", "TORCH_COMPILE_")
ENV_IGNORED = frozenset({
    # cache location and toggles
    "TORCHINDUCTOR_CACHE_DIR", "TORCHINDUCTOR_FX_GRAPH_CACHE", "TORCHINDUCTOR_FX_GRAPH_CACHE_DEFAULT",
    "TORCHINDUCTOR_AUTOGRAD_CACHE", "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE", "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE",
    "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE", "TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE",
    "TORCHINDUCTOR_NON_BLOCKING_REMOTE_CACHE_WRITE", "TORCHINDUCTOR_FORCE_DISABLE_CACHES",
    "TORCH_COMPILE_FORCE_DISABLE_CACHES", "TORCHINDUCTOR_REDIS_URL", "TORCHINDUCTOR_REDIS_HOST",
    "TORCHINDUCTOR_REDIS_PORT",
    # compile parallelism, pools, timeouts
    "TORCHINDUCTOR_COMPILE_THREADS", "TORCHINDUCTOR_WORKER_START", "TORCHINDUCTOR_WORKER_SUPPRESS_LOGGING",
    "TORCHINDUCTOR_WORKER_LOGPATH", "TORCHINDUCTOR_COMPILE_WORKER_WAIT_TIMEOUT", "TORCHINDUCTOR_FILE_LOCK_TIMEOUT",
    "TORCHINDUCTOR_QUIESCE_ASYNC_COMPILE_POOL", "TORCHINDUCTOR_AUTOTUNE_POOL_INACTIVITY_TIMEOUT",
    "TORCHINDUCTOR_PRECOMPILATION_TIMEOUT_SECONDS",
    # logging, tracing, profiling of the compiler itself
    "TORCH_COMPILE_JOB_ID", "TORCH_COMPILE_DEBUG_DIR", "TORCH_COMPILE_CPROFILE", "TORCH_COMPILE_DYNAMO_PROFILER",
    "TORCHINDUCTOR_CACHE_DUMP_FILE_PATH", "TORCHINDUCTOR_MM_LOGGING_FILE", "TORCHINDUCTOR_CONV_LOGGING_FILE",
    "TORCHINDUCTOR_FLEX_ATTENTION_LOGGING_FILE", "TORCHINDUCTOR_AUTOHEURISTIC_LOG_PATH",
})

# /proc/cpuinfo flags behind Inductor's x86 ISA choice (torch.cpu._is_*_supported via cpuinfo).
_AVX2 = {"avx2", "fma"}
_AVX512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq", "fma"}


@functools.cache
def torch_origin() -> str | None:
    """torch's package dir, found without importing it (None if torch is not installed)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(Path(next(iter(spec.submodule_search_locations))).resolve())


def torch_cuda_version() -> str:
    """`torch.version.cuda`, read from the file's text ("none" on CPU wheels)."""
    origin = torch_origin()
    try:
        text = (Path(origin) / "version.py").read_text() if origin else ""
    except OSError:
        text = ""
    return cuda_version_in(text)


def cuda_version_in(version_py: str) -> str:
    """The `cuda = '12.8'` (or `cuda: Optional[str] = '12.8'`) value of torch/version.py, else "none"."""
    m = re.search(r"^cuda(?:\s*:\s*[^=]+)?\s*=\s*['\"]([^'\"]+)['\"]", version_py, re.MULTILINE)
    return m.group(1) if m else "none"


def triton_version() -> str:
    return dist_version("triton") or dist_version("pytorch-triton") or "none"


def python_version() -> str:
    return f"{sys.implementation.name}-{platform.python_version()}"


def username() -> str:
    """The user part of Inductor's default cache dir (torch/_inductor/runtime/cache_dir_utils.py)."""
    try:
        user = getpass.getuser()
    except (KeyError, ModuleNotFoundError, OSError):
        getuid = getattr(os, "getuid", None)
        user = f"uid_{getuid()}" if callable(getuid) else "unknown_user"
    return re.sub(r'[\\/:*?"<>|]', "_", user)


def default_pch_dir(tmpdir: str | None = None) -> Path:
    """Where Inductor reads precompiled headers: default_cache_dir()/precompiled_headers."""
    return Path(tmpdir or tempfile.gettempdir()) / f"torchinductor_{username()}" / "precompiled_headers"


# --- CPU -------------------------------------------------------------------------------------------


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The first processor's flags/Features line from /proc/cpuinfo (empty off Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return frozenset()
    m = re.search(r"^(?:flags|Features)\s*:\s*(.*)$", text, re.MULTILINE)
    return frozenset(m.group(1).split()) if m else frozenset()


def valid_isas(machine: str, flags: frozenset[str]) -> list[str]:
    """Inductor's valid_vec_isa_list, best first, as names (torch/_inductor/cpu_vec_isa.py)."""
    if machine in ("x86_64", "AMD64"):
        isas = []
        if flags >= _AVX512:
            if "avx512_vnni" in flags:
                if "amx_tile" in flags:
                    isas.append("amx_tile")
                isas.append("avx512_vnni")
            isas.append("avx512")
        if flags >= _AVX2:
            isas.append("avx2")
        return isas
    if machine in ("aarch64", "arm64"):
        # SVE vector length needs a syscall torch makes; hosts with the same flags share a choice.
        return ["sve"] if {"sve", "bf16"} <= flags or {"sve2", "bf16"} <= flags else ["neon"]
    if machine == "ppc64le":
        return ["vsx"]
    if machine == "s390x":
        return ["zvector"] if "vxe" in flags else []
    return []


def pick_isa(machine: str, flags: frozenset[str], capability: str | None) -> str:
    """Inductor's pick_vec_isa: the best valid ISA, narrowed by ATEN_CPU_CAPABILITY when set."""
    isas = valid_isas(machine, flags)
    if not isas or capability == "default":
        return "default"
    if capability in ("avx2", "avx512", "vsx", "zvector"):
        # Inductor matches by substring of the ISA's name, so "avx512" selects AMX/VNNI when present.
        for isa in isas:
            if isa.startswith(capability) or (capability == "avx512" and isa == "amx_tile"):
                return isa
    # Unset, unknown or unsupported: Inductor takes the best valid ISA (warning on a bad value).
    return isas[0]


def isa_extensions(isa: str, flags: frozenset[str]) -> list[str]:
    """Flags Inductor adds to the ISA's compile line when the CPU has them (bf16/fp16 variants). Its
    VecAVX512VNNI keeps its base flags (build_arch_flags), so avx512_vnni gets no bf16 extension."""
    ext = []
    if isa in ("avx512", "amx_tile") and "avx512_bf16" in flags:
        ext.append("avx512_bf16")
    if isa == "amx_tile" and "amx_fp16" in flags:
        ext.append("amx_fp16")
    return ext


def cpu_isa(env: Mapping[str, str]) -> str:
    machine = platform.machine()
    flags = cpu_flags()
    isa = pick_isa(machine, flags, env.get("ATEN_CPU_CAPABILITY"))
    return "+".join([f"{machine}:{isa}", *isa_extensions(isa, flags)])


def omp_threads(env: Mapping[str, str]) -> str:
    value = env.get("OMP_NUM_THREADS")
    if value:
        return value
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        n = os.cpu_count() or 1
    return f"default:{n}"


# --- compiler --------------------------------------------------------------------------------------


def cxx_name(env: Mapping[str, str]) -> str:
    """The compiler Inductor runs: config.cpp.cxx defaults to $CXX, else g++ (clang++ on macOS)."""
    return env.get("CXX") or ("clang++" if sys.platform == "darwin" else "g++")


def cxx_path(env: Mapping[str, str]) -> str | None:
    return shutil.which(cxx_name(env), path=env.get("PATH"))


@functools.cache
def _cxx_identity(path: str, mtime_ns: int) -> str:
    # Inductor's get_compiler_version_info: `-v` with LC_ALL=C (else `--version`), hashed here.
    env = {**os.environ, "LC_ALL": "C"}
    for flag in ("-v", "--version"):
        try:
            out = subprocess.run([path, flag], capture_output=True, env=env, timeout=30, check=True)
        except (OSError, subprocess.SubprocessError):
            continue
        return hashlib.sha256(out.stdout + out.stderr).hexdigest()[:16]
    return "unknown"


def cxx_identity(path: str) -> str:
    """sha256 of the compiler's `-v` output; probed once per process per compiler binary."""
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        mtime = 0
    return _cxx_identity(path, mtime)


# --- env and GPU -----------------------------------------------------------------------------------


def output_env(env: Mapping[str, str]) -> dict[str, str]:
    """TORCHINDUCTOR_* / TORCH_COMPILE_* variables that can change compiled output."""
    return {k: v for k, v in env.items() if k.startswith(ENV_PREFIXES) and k not in ENV_IGNORED}


def _smi_query(exe: str, fields: str) -> list[str] | None:
    try:
        out = subprocess.run([exe, f"--query-gpu={fields}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.strip().splitlines()
    return [part.strip() for part in lines[0].split(",")] if lines and lines[0].strip() else None


@functools.cache
def nvidia_smi() -> tuple[str, str] | None:
    """(GPU name, compute capability) of GPU 0, or None without nvidia-smi or a GPU. Drivers older than
    ~510 lack the compute_cap field: the name alone (which implies it) is then used."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    parts = _smi_query(exe, "name,compute_cap") or _smi_query(exe, "name")
    if not parts or not parts[0]:
        return None
    return parts[0], parts[1] if len(parts) > 1 else ""


def gpu_count() -> int:
    """GPUs `nvidia-smi -L` lists (0 without nvidia-smi)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return 0
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"


def driver_in(text: str) -> str | None:
    """The driver version in /proc/driver/nvidia/version's first line ("NVRM version: NVIDIA UNIX x86_64
    Kernel Module  550.54.15  ...", or "... Open Kernel Module for x86_64  580.95.05  ...")."""
    m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
    return m.group(1) if m else None


@functools.cache
def driver_version() -> str:
    """The NVIDIA driver's version, from /proc (no process), else nvidia-smi; "unknown" without either. It
    keys the CUDA driver's own JIT cache, which a driver upgrade invalidates."""
    try:
        found = driver_in(Path(DRIVER_VERSION_FILE).read_text(errors="replace"))
    except OSError:
        found = None
    if found is None and (exe := shutil.which("nvidia-smi")) is not None:
        parts = _smi_query(exe, "driver_version")
        found = parts[0] if parts and re.fullmatch(r"\d+(?:\.\d+)+", parts[0]) else None
    return found or "unknown"
