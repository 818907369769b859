"""InductorBackend without torch: the fingerprint (stable, sensitive to every field Inductor's own key
misses), the ISA choice it mirrors, the roots, include() and the build command."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cachekeeper.backends.base import BuildJob, ModelRef
from cachekeeper.backends.inductor import InductorBackend, probes
from cachekeeper.backends.inductor import backend as inductor_backend
from cachekeeper.backends.toolchain import dist_version
from cachekeeper.errors import BackendUnavailable
from cachekeeper.format import relocate
from cachekeeper.format.spec import EntrySpec, Shape

CPU = {"device": "cpu"}


def backend(**env: str | None) -> InductorBackend:
    """A backend that sees this process's env with `env` applied (None deletes a variable)."""
    merged = dict(os.environ)
    for k, v in env.items():
        if v is None:
            merged.pop(k, None)
        else:
            merged[k] = v
    return InductorBackend(env=merged)


def fp_id(**env: str | None) -> str:
    return backend(**env).fingerprint(CPU).id


def fake_cxx(tmp_path: Path, name: str, banner: str) -> Path:
    exe = tmp_path / name
    exe.write_text(f"#!/bin/sh\necho '{banner}' >&2\n")
    exe.chmod(0o755)
    return exe


# --- fingerprint -----------------------------------------------------------------------------------


def test_fingerprint_names_the_toolchain() -> None:
    fields = dict(backend().fingerprint(CPU).fields)
    assert {"torch", "torch_path", "python", "device", "cpu_isa", "omp_threads", "cxx", "cxx_id"} <= fields.keys()
    assert fields["device"] == "cpu"
    assert Path(fields["torch_path"], "__init__.py").is_file()
    assert Path(fields["cxx"]).is_absolute()


def test_fingerprint_is_fast_once_the_compiler_was_probed() -> None:
    b = backend()
    b.fingerprint(CPU)
    best = min(_timed(lambda: b.fingerprint(CPU)) for _ in range(5))
    assert best < 0.05, f"warm fingerprint took {best * 1000:.1f} ms"


def _timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


@pytest.mark.parametrize("env", [
    {"OMP_NUM_THREADS": "1"},
    {"OMP_NUM_THREADS": "3"},
    {"ATEN_CPU_CAPABILITY": "default"},       # vector ISA off: different kernels on any x86/arm host
    {"TORCHINDUCTOR_CPP_WRAPPER": "1"},
    {"TORCHINDUCTOR_MAX_AUTOTUNE": "1"},
    {"TORCH_COMPILE_CACHE_KEY_TAG": "x"},
    {"TORCHINDUCTOR_SOME_FUTURE_KNOB": "1"},  # unknown variables separate (a miss, never a wrong hit)
], ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items()))
def test_output_changing_env_changes_the_id(env: dict[str, str]) -> None:
    base = {k: None for k in env}
    assert fp_id(**env) != fp_id(**base)


@pytest.mark.parametrize("var", [
    "TORCHINDUCTOR_CACHE_DIR", "TORCHINDUCTOR_COMPILE_THREADS", "TORCHINDUCTOR_FX_GRAPH_CACHE",
    "TORCHINDUCTOR_AUTOGRAD_CACHE", "TORCH_COMPILE_JOB_ID",
])
def test_env_that_cannot_change_output_keeps_the_id(var: str) -> None:
    assert fp_id(**{var: "/somewhere/else"}) == fp_id(**{var: None})


def test_compiler_path_and_identity_change_the_id(tmp_path: Path) -> None:
    a = fake_cxx(tmp_path, "cxx-a", "gcc version 12.2.0")
    b = fake_cxx(tmp_path, "cxx-b", "gcc version 13.1.0")
    fa, fb = backend(CXX=str(a)).fingerprint(CPU), backend(CXX=str(b)).fingerprint(CPU)
    assert fa.id != fp_id(CXX=None)
    assert fa.diff(fb).keys() == {"cxx", "cxx_id"}


def test_compiler_replaced_in_place_is_probed_again(tmp_path: Path) -> None:
    exe = fake_cxx(tmp_path, "c++", "gcc version 12.2.0")
    before = backend(CXX=str(exe)).fingerprint(CPU)
    fake_cxx(tmp_path, "c++", "gcc version 14.1.0")
    os.utime(exe, ns=(time.time_ns(), time.time_ns() + 10**9))  # a distinct mtime even on coarse clocks
    assert backend(CXX=str(exe)).fingerprint(CPU).diff(before).keys() == {"cxx_id"}


def test_device_changes_the_id_and_adds_gpu_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probes, "nvidia_smi", lambda: ("NVIDIA H200", "9.0"))
    monkeypatch.setattr(probes, "torch_cuda_version", lambda: "12.8")
    cpu, cuda = backend().fingerprint(CPU), backend().fingerprint({"device": "cuda"})
    assert cpu.id != cuda.id
    assert {"device", "gpu", "gpu_cc", "cuda", "triton"} <= cpu.diff(cuda).keys()
    assert cuda.get("gpu") == "NVIDIA H200"


def test_compile_options_change_the_id_but_locations_do_not() -> None:
    b = backend()
    assert b.fingerprint({**CPU, "mode": "max-autotune"}).id != b.fingerprint(CPU).id
    assert b.fingerprint({**CPU, "pch_dir": "/elsewhere"}).id == b.fingerprint(CPU).id


# --- version pins: the contract checks the backend's own; a config may pin more -------------------


def test_a_pin_of_the_diffusers_the_warm_up_runs_is_checked_too() -> None:
    # The contract (BackendConformance) covers torch's pin; diffusers' shapes what Inductor compiles.
    if dist_version("diffusers") is None:
        pytest.skip("diffusers is not installed")
    with pytest.raises(BackendUnavailable, match=r"config pins diffusers 0\.0\.1 but "):
        backend().fingerprint({**CPU, "diffusers_version": "0.0.1"})


# --- availability ----------------------------------------------------------------------------------


def test_available_here() -> None:
    assert backend().unavailable_reason() is None


def test_missing_compiler_is_unavailable_with_a_reason() -> None:
    b = backend(CXX="no-such-compiler-xyz")
    assert "no-such-compiler-xyz" in (b.unavailable_reason() or "")
    with pytest.raises(BackendUnavailable):
        b.fingerprint(CPU)


def test_missing_torch_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inductor_backend, "dist_version", lambda name: None)
    assert backend().unavailable_reason() == "torch is not installed"


@pytest.mark.parametrize(("text", "version"), [
    ("__version__ = '2.13.0+cu128'\ncuda: Optional[str] = '12.8'\nhip = None\n", "12.8"),
    ("cuda = '12.1'\n", "12.1"),
    ("__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n", "none"),
])
def test_cuda_version_is_read_from_torch_version_py_text(text: str, version: str) -> None:
    assert probes.cuda_version_in(text) == version


def test_cuda_with_a_cpu_only_torch_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probes, "nvidia_smi", lambda: ("NVIDIA H200", "9.0"))
    monkeypatch.setattr(probes, "torch_cuda_version", lambda: "none")
    assert "CPU-only" in (backend().unavailable_reason({"device": "cuda"}) or "")


def test_cuda_without_nvidia_smi_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probes, "torch_cuda_version", lambda: "12.8")
    monkeypatch.setattr(probes, "nvidia_smi", lambda: None)
    assert "nvidia-smi" in (backend().unavailable_reason({"device": "cuda"}) or "")
    with pytest.raises(BackendUnavailable):
        backend().fingerprint({"device": "cuda"})


# --- the ISA Inductor would pick -------------------------------------------------------------------

AVX2 = frozenset({"avx", "avx2", "fma"})
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512vl", "avx512dq"}
SPR = AVX512 | {"avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"}


@pytest.mark.parametrize(("machine", "flags", "capability", "isa"), [
    ("x86_64", AVX2, None, "avx2"),
    ("x86_64", AVX512, None, "avx512"),
    ("x86_64", AVX512 | {"avx512_vnni"}, None, "avx512_vnni"),
    ("x86_64", SPR, None, "amx_tile"),
    ("x86_64", SPR, "avx2", "avx2"),                  # the case that returned NaN from an AVX-512 cache
    ("x86_64", SPR, "avx512", "amx_tile"),            # Inductor matches "avx512" inside AMX's name
    ("x86_64", SPR, "default", "default"),
    ("x86_64", AVX2, "avx512", "avx2"),               # unsupported request: Inductor keeps its best
    ("x86_64", AVX2, "bogus", "avx2"),
    ("x86_64", frozenset({"sse4_2"}), None, "default"),
    ("aarch64", frozenset({"asimd"}), None, "neon"),
    ("aarch64", frozenset({"asimd", "sve", "bf16"}), None, "sve"),
])
def test_pick_isa_mirrors_inductor(machine: str, flags: frozenset[str], capability: str | None, isa: str) -> None:
    assert probes.pick_isa(machine, flags, capability) == isa


def test_isa_field_carries_extensions_that_change_compile_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probes, "cpu_flags", lambda: SPR | {"amx_fp16"})
    monkeypatch.setattr(probes.platform, "machine", lambda: "x86_64")
    assert probes.cpu_isa({}) == "x86_64:amx_tile+avx512_bf16+amx_fp16"
    assert probes.cpu_isa({"ATEN_CPU_CAPABILITY": "avx2"}) == "x86_64:avx2"


def test_avx512_cache_is_not_offered_to_an_avx2_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probes.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(probes, "cpu_flags", lambda: AVX512)
    avx512 = backend(ATEN_CPU_CAPABILITY=None).fingerprint(CPU)
    monkeypatch.setattr(probes, "cpu_flags", lambda: AVX2)
    avx2 = backend(ATEN_CPU_CAPABILITY=None).fingerprint(CPU)
    assert avx512.diff(avx2) == {"cpu_isa": ("x86_64:avx512", "x86_64:avx2")}


# --- roots, include, build command -----------------------------------------------------------------


def test_build_roots_put_the_header_under_the_builds_tmpdir(tmp_path: Path) -> None:
    roots = backend().build_roots(tmp_path)
    assert roots["cache"].parent == tmp_path and roots["cache"].name.startswith("cache")
    assert len(str(roots["cache"])) == relocate.RESERVED   # padded: hydrate writes a served dir this long
    assert roots["pch"] == tmp_path / "tmp" / f"torchinductor_{probes.username()}" / "precompiled_headers"


def test_extra_roots_follow_the_serving_tmpdir_unless_configured(tmp_path: Path) -> None:
    user = probes.username()
    assert backend(TMPDIR=str(tmp_path)).extra_roots({}) == {
        "pch": tmp_path / f"torchinductor_{user}" / "precompiled_headers"}
    assert backend().extra_roots({"pch_dir": "/opt/pch"}) == {"pch": Path("/opt/pch")}


@pytest.mark.parametrize(("root", "relpath", "kept"), [
    ("pch", "cyow.h", True),
    ("pch", "cyow.h.gch", True),
    ("pch", "locks/cyow.lock", False),
    ("pch", "stray.txt", False),
])
def test_include_keeps_headers_in_the_pch_root_only(root: str, relpath: str, kept: bool) -> None:
    assert backend().include(root, relpath, Path("/unused") / relpath) is kept


def test_build_command_points_inductor_at_the_roots(tmp_path: Path) -> None:
    b = backend()
    roots = {k: str(v) for k, v in b.build_roots(tmp_path).items()}
    spec = EntrySpec("tiny-flux", "transformer", "inductor", "full", Shape(64, 64, 1), "float32")
    job = BuildJob(spec, ModelRef("tiny-flux", "transformer", path="/m"), roots, CPU, str(tmp_path / "r.json"))
    cmd = b.build_command(job)
    assert cmd.argv[:3] == [sys.executable, "-m", "cachekeeper.backends.inductor.build"]
    assert cmd.env["TORCHINDUCTOR_CACHE_DIR"] == roots["cache"]
    assert probes.default_pch_dir(cmd.env["TMPDIR"]) == Path(roots["pch"])
    assert cmd.env["TORCHINDUCTOR_FX_GRAPH_CACHE"] == cmd.env["TORCHINDUCTOR_AUTOGRAD_CACHE"] == "1"


# --- the same choice, asked of torch itself ----------------------------------------------------------

CAPABILITIES = [None, "default", "avx2", "avx512", "vsx"]  # vsx: not this host's, so the fallback
_TORCH_PICKS = """
import json, platform, sys
from torch._inductor import cpu_vec_isa

def name(isa):  # VecAVX512VNNI is "avx512 avx512_vnni": the flags it needs, the last its own
    return str(isa).split()[-1] if isa else "default"

def extensions(isa):
    flags = isa.build_arch_flags().split() if isa else []
    return [ext for ext, flag in (("avx512_bf16", "-mavx512bf16"), ("amx_fp16", "-mamx-fp16")) if flag in flags]

valid = cpu_vec_isa.valid_vec_isa_list()
picks = {}
for cap in json.loads(sys.argv[1]):
    isa = cpu_vec_isa.get_isa_from_cpu_capability(cap, valid, cpu_vec_isa.invalid_vec_isa) if valid else None
    picks[str(cap)] = "+".join([f"{platform.machine()}:{name(isa)}", *extensions(isa)])
print(json.dumps({"valid": [name(i) for i in valid], "picks": picks}))
"""


@pytest.fixture(scope="module")
def torch_isa_choice(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What torch._inductor.cpu_vec_isa decides on this host (with torch loaded and its test compiles),
    for each ATEN_CPU_CAPABILITY: one subprocess for all of them, its builds in a scratch cache dir."""
    import json
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path_factory.mktemp("inductor"))
    out = subprocess.run([sys.executable, "-c", _TORCH_PICKS, json.dumps(CAPABILITIES)], env=env,
                         capture_output=True, text=True, check=True, timeout=600).stdout
    choice: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return choice


@pytest.mark.torch
def test_the_valid_isas_are_torchs_on_this_host(torch_isa_choice: dict[str, Any]) -> None:
    """Differential: our probe reads /proc/cpuinfo without importing torch; torch decides with torch."""
    import platform

    assert probes.valid_isas(platform.machine(), probes.cpu_flags()) == torch_isa_choice["valid"]


@pytest.mark.torch
@pytest.mark.parametrize("capability", CAPABILITIES)
def test_the_isa_probe_picks_what_torch_picks_on_this_host(capability: str | None,
                                                           torch_isa_choice: dict[str, Any]) -> None:
    env = {} if capability is None else {"ATEN_CPU_CAPABILITY": capability}
    assert probes.cpu_isa(env) == torch_isa_choice["picks"][str(capability)]
