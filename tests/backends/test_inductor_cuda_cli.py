"""The JIT caches of a CUDA server, through the real CLI on a faked CUDA host: an `nvidia-smi` that answers as
a GPU would (name, compute capability, driver) and a torch whose version.py says CUDA (the hydrate path reads
only that file: it never imports torch). What a build filled is keyed by the GPU, CUDA and driver, the
server's env points at each cache in the hydrated dir, and bad input is one line:
  * a Triton cache built for another GPU or CUDA: refused by its key (the fingerprint), never placed;
  * a served dir the server cannot write (Inductor and Triton write into it);
  * TRITON_CACHE_DIR already set to another dir (a warning: the exports point it at the hydrated one);
  * a served dir longer than the relocatable files reserve; a bad `serve_compile_threads`.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_env import one_error_line, run_cli
from tests.test_cli_edges import hint_line

SMI = """#!/bin/sh
case "$*" in
  *name,compute_cap*) echo "${FAKE_GPU:-NVIDIA H200}, ${FAKE_CC:-9.0}" ;;
  *driver_version*) echo "${FAKE_DRIVER:-580.95.05}" ;;
  *-L*) echo "GPU 0: ${FAKE_GPU:-NVIDIA H200} (UUID: GPU-0)" ;;
esac
"""

PUBLISH = """
import json, os, pickle, sys
from pathlib import Path
from cachekeeper.backends.host import host_toolchain
from cachekeeper.config import load_config
from cachekeeper.publish.upload import publish
from cachekeeper.stores import open_store

config = load_config(sys.argv[1])
tc = host_toolchain(config, "inductor")
cache = tc.backend.build_roots(Path(sys.argv[2]))["cache"]
kdir = cache / "triton" / "0" / "KHASH"            # a Triton kernel dir, as triton 3.6 writes it
kdir.mkdir(parents=True)
(kdir / "k.cubin").write_bytes(b"cubin")
(kdir / "__grp__k.json").write_text(json.dumps({"child_paths": {"k.cubin": str(kdir / "k.cubin")}}))
(cache / "torch-kernels").mkdir()
(cache / "torch-kernels" / "kernel_arch9.0_nvrtc13.0_sass").write_bytes(b"jiterator")
store = open_store(config.store)
m = publish(store, fingerprint=tc.fingerprint, spec=config.entries()[0].spec, roots={"cache": cache},
            include=tc.backend.include, relocatable_roots=tc.backend.relocatable_roots).manifest
print(json.dumps({"fingerprint": tc.fingerprint.id, "relocated": [f.path for f in m.files if f.relocate]}))
"""


@pytest.fixture
def host(tmp_path: Path) -> dict[str, str]:
    """The env of a CUDA host: the fake nvidia-smi first on PATH, the fake torch first on PYTHONPATH."""
    if shutil.which("g++") is None:
        pytest.skip("no C++ compiler: the inductor fingerprint needs one")
    bin_dir, fake = tmp_path / "bin", tmp_path / "fake-torch"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text("raise ImportError('the hydrate path never imports torch')\n")
    (fake / "torch" / "version.py").write_text("__version__ = '2.13.0+cu130'\ncuda = '13.0'\n")
    config = tmp_path / "ck.yaml"
    config.write_text(f"""version: 1
store: file://{tmp_path}/store
defaults: {{backends: [inductor], shapes: {{height: [64], width: [64]}}}}
backend_options:
  inductor: {{device: cuda}}
models:
  - {{name: m, path: ./m}}
""")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CACHEKEEPER_", "TORCHINDUCTOR_", "TRITON_"))}
    return {**env, "PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": str(fake),
            "CACHEKEEPER_HOME": str(tmp_path / "home"), "CONFIG": str(config)}


def published(host: dict[str, str], tmp_path: Path, **fake: str) -> dict[str, object]:
    proc = subprocess.run([sys.executable, "-c", PUBLISH, host["CONFIG"], str(tmp_path / "ck-build-1")],
                          env={**host, **fake}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    shutil.rmtree(tmp_path / "ck-build-1")
    out: dict[str, object] = json.loads(proc.stdout)
    return out


def exports(stdout: str) -> dict[str, str]:
    return dict(shlex.split(line.removeprefix("export "))[0].split("=", 1) for line in stdout.splitlines()
                if line.startswith("export "))


def test_each_jit_cache_is_placed_and_exported_into_the_hydrated_dir(host: dict[str, str], tmp_path: Path) -> None:
    built = published(host, tmp_path)
    assert built["relocated"] == ["triton/0/KHASH/__grp__k.json"]
    proc = run_cli(["hydrate", "--config", host["CONFIG"], "--dest", str(tmp_path / "d"), "--print-env"], host,
                   tmp_path)
    env = exports(proc.stdout)
    dest = Path(env["TORCHINDUCTOR_CACHE_DIR"])
    assert dest.name == built["fingerprint"]
    assert env == {"TORCHINDUCTOR_CACHE_DIR": str(dest), "TRITON_CACHE_DIR": f"{dest}/triton/0",
                   "PYTORCH_KERNEL_CACHE_PATH": f"{dest}/torch-kernels",
                   "CUDA_CACHE_PATH": f"{dest}/cuda-cache/580.95.05"}
    group = json.loads((dest / "triton/0/KHASH/__grp__k.json").read_text())["child_paths"]
    assert all(os.path.exists(p) for p in group.values())
    assert (Path(env["PYTORCH_KERNEL_CACHE_PATH"]) / "kernel_arch9.0_nvrtc13.0_sass").exists()
    # another driver: its CUDA JIT cache is its own (a driver upgrade voids the old one's entries)
    other = exports(run_cli(["env", "--config", host["CONFIG"], "--dest", str(tmp_path / "d")],
                            {**host, "FAKE_DRIVER": "590.10.01"}, tmp_path).stdout)
    assert other["CUDA_CACHE_PATH"] == f"{dest}/cuda-cache/590.10.01"


@pytest.mark.parametrize(("fake", "field"), [({"FAKE_GPU": "NVIDIA H100 80GB HBM3"}, "gpu"),
                                             ({"FAKE_CC": "8.0"}, "gpu_cc")])
def test_a_triton_cache_built_for_another_gpu_is_refused_by_its_key_and_never_placed(
        host: dict[str, str], tmp_path: Path, fake: dict[str, str], field: str) -> None:
    published(host, tmp_path, **fake)
    proc = run_cli(["hydrate", "--config", host["CONFIG"], "--dest", str(tmp_path / "d")], host, tmp_path, ok=False)
    line = one_error_line(proc)
    assert proc.returncode == 8 and "published toolchains differ" in line and f"{field}=" in line
    assert hint_line(proc)
    assert not [p for p in (tmp_path / "d").rglob("*") if p.is_file() and ".cachekeeper" not in p.parts]


def test_a_triton_cache_built_for_another_cuda_is_refused_by_its_key(host: dict[str, str], tmp_path: Path) -> None:
    published(host, tmp_path)
    fake = Path(host["PYTHONPATH"]) / "torch" / "version.py"
    fake.write_text("__version__ = '2.13.0+cu128'\ncuda = '12.8'\n")
    line = one_error_line(run_cli(["hydrate", "--config", host["CONFIG"], "--dest", str(tmp_path / "d")], host,
                                  tmp_path, ok=False))
    assert "cuda='13.0' (host '12.8')" in line


def test_triton_cache_dir_set_elsewhere_is_one_warning_and_the_exports_point_it_home(
        host: dict[str, str], tmp_path: Path) -> None:
    proc = run_cli(["env", "--config", host["CONFIG"], "--dest", str(tmp_path / "d")],
                   {**host, "TRITON_CACHE_DIR": "/var/cache/triton"}, tmp_path)
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and "TRITON_CACHE_DIR=/var/cache/triton" in warnings[0]
    assert exports(proc.stdout)["TRITON_CACHE_DIR"].endswith("/triton/0")


def test_a_served_dir_the_server_cannot_write_is_one_error(host: dict[str, str], tmp_path: Path) -> None:
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode:
        pytest.skip("no unprivileged user+mount namespaces here (unshare -rm)")
    ro = tmp_path / "ro"
    ro.mkdir()
    script = (f'mount --bind "{ro}" "{ro}" && mount -o remount,bind,ro "{ro}" && '
              f'exec "{sys.executable}" -m cachekeeper env --config "{host["CONFIG"]}" --dest "{ro}/d"')
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script], env=host, capture_output=True, text=True,
                          timeout=120)
    assert "Traceback" not in proc.stderr
    line = one_error_line(proc)
    assert proc.returncode == 9 and "is not writable" in line and "Triton" in line
    assert any(h.startswith("hint: ") and "server's user can write" in h for h in proc.stderr.splitlines())


def test_a_served_dir_longer_than_the_build_reserved_is_one_error(host: dict[str, str], tmp_path: Path) -> None:
    long = tmp_path / ("x" * 190)
    proc = run_cli(["hydrate", "--config", host["CONFIG"], "--dest", str(long)], host, tmp_path, ok=False)
    line = one_error_line(proc)
    assert proc.returncode == 9 and "reserve 200" in line
    assert "dest of at most 183 bytes" in hint_line(proc)
    assert not long.exists()


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e9", "4096", "two"])
def test_a_bad_serve_compile_threads_is_one_config_error(host: dict[str, str], tmp_path: Path, value: str) -> None:
    proc = run_cli(["env", "--config", host["CONFIG"], "--dest", str(tmp_path / "d"), "--option",
                    f"serve_compile_threads={value}"], host, tmp_path, ok=False)
    line = one_error_line(proc)
    assert proc.returncode == 2 and "serve_compile_threads" in line
    assert "a whole number >= 1 and <= 1024" in hint_line(proc)


def test_serve_compile_threads_is_exported_and_is_no_fingerprint_field(host: dict[str, str], tmp_path: Path) -> None:
    plain = exports(run_cli(["env", "--config", host["CONFIG"], "--dest", str(tmp_path / "d")], host,
                            tmp_path).stdout)
    one = exports(run_cli(["env", "--config", host["CONFIG"], "--dest", str(tmp_path / "d"), "--option",
                           "serve_compile_threads=1"], host, tmp_path).stdout)
    assert one == {**plain, "TORCHINDUCTOR_COMPILE_THREADS": "1"}   # the same dir: the same fingerprint


@pytest.mark.parametrize("value", ["0", "nan", "-3", "inf", "99999"])
def test_the_python_api_checks_serve_compile_threads_where_it_enters(tmp_path: Path, value: str) -> None:
    import cachekeeper
    from cachekeeper.errors import ConfigError

    if shutil.which("g++") is None:
        pytest.skip("no C++ compiler")
    with pytest.raises(ConfigError, match="serve_compile_threads"):
        cachekeeper.env(backend="inductor", dest=tmp_path / "d", device="cpu", options={"serve_compile_threads": value})
    two = cachekeeper.env(backend="inductor", dest=tmp_path / "d", device="cpu", options={"serve_compile_threads": "2"})
    assert two["TORCHINDUCTOR_COMPILE_THREADS"] == "2" and set(two) == {"TORCHINDUCTOR_CACHE_DIR",
                                                                       "TORCHINDUCTOR_COMPILE_THREADS"}
