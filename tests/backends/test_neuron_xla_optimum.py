"""The XLA-era Neuron cache layout (`neuron_xla`) against optimum-neuron 0.4.5's own cache helpers.

optimum-neuron is installed `--no-deps` into .venv-tpu/optimum-neuron (scripts/setup_tpu; no Neuron SDK,
no torch change) and imported only in a subprocess. `optimum.neuron.utils.cache_utils` imports without
Neuron hardware and is called; `optimum.neuron.cache.hub_cache` needs an older transformers and
libneuronxla (not on the registry), so its documented behaviour is read from its source instead, and the
test says which. Without the package every test skips, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from cachekeeper.backends.neuron_xla import NeuronXlaBackend
from tests.simulated import DEFAULT_VERSIONS, REPO
from tests.simulated.harness import clear_device_env, install

pytestmark = pytest.mark.real_neuron

TARGET = Path(os.environ.get("CACHEKEEPER_OPTIMUM_NEURON_PATH") or REPO / ".venv-tpu" / "optimum-neuron")
PACKAGE = TARGET / "optimum" / "neuron"
VERSION = DEFAULT_VERSIONS["neuronx-cc"]

PROBE = """
import json, os, sys
from pathlib import Path
from optimum.neuron.utils import cache_utils as c
out = {}
for flags in ("", "--cache_dir=/srv/neuron-cache", "--no-cache"):
    os.environ["NEURON_CC_FLAGS"] = flags
    path = c.get_neuron_cache_path()
    out[flags] = None if path is None else str(path)
os.environ["NEURON_CC_FLAGS"] = "-O1"
c.set_neuron_cache_path("/srv/hydrated")
out["set"] = os.environ["NEURON_CC_FLAGS"]
out["relevant"] = sorted(str(p.relative_to(sys.argv[1])) for p in c.list_files_in_neuron_cache(sys.argv[1], True))
print(json.dumps(out))
"""


@pytest.fixture(autouse=True)
def host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if not (PACKAGE / "utils" / "cache_utils.py").is_file():
        pytest.skip(f"optimum-neuron is not installed in {TARGET} (run scripts/setup_tpu)")
    clear_device_env(monkeypatch)
    install(monkeypatch, tmp_path / "site")


def cache_dir(root: Path) -> Path:
    """A cache dir as libneuronxla writes it: complete and partial modules, locks, another compiler."""
    files = {
        f"neuronxcc-{VERSION}+2d4f85be/MODULE_11+22/model.neff": b"neff",
        f"neuronxcc-{VERSION}+2d4f85be/MODULE_11+22/model.hlo_module.pb": b"hlo",
        f"neuronxcc-{VERSION}+2d4f85be/MODULE_11+22/compile_flags.json": b"{}",
        f"neuronxcc-{VERSION}+2d4f85be/MODULE_11+22/model.done": b"",
        f"neuronxcc-{VERSION}+2d4f85be/MODULE_33+44/model.hlo_module.pb": b"partial: no NEFF, no marker",
        f"neuronxcc-{VERSION}+2d4f85be/MODULE_11+22/model.neff.lock": b"",
        "neuronxcc-2.21.0.0+0abc1234/MODULE_11+22/model.neff": b"another compiler",
        "neuronxcc-2.21.0.0+0abc1234/MODULE_11+22/model.done": b"",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cache_dir(tmp_path_factory.mktemp("neuron-cache"))


@cache
def probe(root: str) -> dict[str, Any]:
    """What optimum-neuron's helpers answer, from one subprocess per cache dir."""
    env = {**os.environ, "PYTHONPATH": str(TARGET)}
    proc = subprocess.run([sys.executable, "-c", PROBE, root], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_the_default_cache_dir_is_optimum_neurons(root: Path) -> None:
    assert probe(str(root))[""] == NeuronXlaBackend.default_cache_dir


@pytest.mark.parametrize(("flags", "theirs"), [("--cache_dir=/srv/neuron-cache", "/srv/neuron-cache"),
                                              ("--no-cache", None)])
def test_flags_that_move_or_drop_the_cache_are_what_doctor_warns_about(flags: str, theirs: str | None,
                                                                      root: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    assert probe(str(root))[flags] == theirs
    monkeypatch.setenv("NEURON_CC_FLAGS", flags)
    assert any("overrides NEURON_COMPILE_CACHE_URL" in w for w in NeuronXlaBackend().env_warnings({}))


def test_set_neuron_cache_path_writes_a_flag_doctor_warns_about(root: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    flags = probe(str(root))["set"]
    assert flags == "-O1 --cache_dir=/srv/hydrated"
    monkeypatch.setenv("NEURON_CC_FLAGS", flags)
    assert NeuronXlaBackend().env_warnings({})


def test_every_file_optimum_neuron_counts_in_a_complete_module_of_this_compiler_travels(root: Path) -> None:
    relevant = probe(str(root))["relevant"]
    backend = NeuronXlaBackend()
    complete = [r for r in relevant if r.startswith(f"neuronxcc-{VERSION}+") and "/MODULE_11+22/" in r]
    assert complete and all(backend.include("cache", r, root / r) for r in complete)
    others = [r for r in relevant if r not in complete]
    assert others and not any(backend.include("cache", r, root / r) for r in others)   # partial, other compiler
    assert backend.include("cache", f"neuronxcc-{VERSION}+2d4f85be/MODULE_11+22/model.done",
                           root / f"neuronxcc-{VERSION}+2d4f85be/MODULE_11+22/model.done")


def test_the_version_dir_carries_a_commit_hash_and_is_matched_by_prefix() -> None:
    """Read, not run (hub_cache needs libneuronxla): hub_registry_path matches `neuronxcc-<version>` as a
    prefix because "the actual path uses the extended compiler version (with commit hash)"."""
    source = (PACKAGE / "cache" / "hub_cache.py").read_text()
    assert 'compiler_prefix = "neuronxcc-" + neuronxcc_version' in source
    assert "root_file.path.startswith(compiler_prefix)" in source
    assert "extended compiler version (with commit hash)" in source
    assert 'get_cache_dir_with_cache_key(f"MODULE_{cache_entry.hash}")' in (PACKAGE / "cache" / "traced.py").read_text()
