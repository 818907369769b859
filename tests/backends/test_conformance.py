"""BackendConformance (cachekeeper/testing/backends.py) for every backend cachekeeper ships, and for a plugin
backend named in CACHEKEEPER_BACKENDS (benchmarks/sim_backend.py). What a backend does beyond the contract
(its own fingerprint fields, probes, env rules) is tested in its own module next to this one.

The device backends run against simulated packages (tests/simulated); nothing here needs the hardware.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from cachekeeper.backends.base import Backend
from cachekeeper.backends.inductor import InductorBackend
from cachekeeper.backends.neuron import NeuronBackend
from cachekeeper.backends.neuron_xla import NeuronXlaBackend
from cachekeeper.backends.tpu import TPUBackend
from cachekeeper.format.spec import EntrySpec, ModelRef, Shape
from cachekeeper.testing.backends import BackendConformance, BuildParts
from tests.simulated import DEFAULT_VERSIONS, REPO
from tests.simulated.harness import WARMUP_OPTIONS, clear_device_env, entry, install, make_tiny_flux

NEFF_KEY = "abcd" + "0123456789abcdef0123456789ab"  # 32 hex
K = "0123456789abcdef"
XLA = f"neuronxcc-{DEFAULT_VERSIONS['neuronx-cc']}"


@pytest.fixture
def simulated_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    clear_device_env(monkeypatch)
    return install(monkeypatch, tmp_path / "site")


class TestInductor(BackendConformance):
    options: ClassVar[dict[str, str]] = {"device": "cpu"}
    # Its `cache` root; the header root's rules are in test_inductor_fingerprint.py.
    artifacts: ClassVar[dict[str, bytes]] = {
        "fxgraph/37/fabc/fdef": b"g", "aotautograd/aabc/entry": b"a", "zn/cznabc.main.so": b"so",
        "zn/cznabc.main.cpp": b"cpp", "7q/c7qabc.py": b"py", "triton/0/ABC/kernel.cubin": b"k",
    }
    debris: ClassVar[dict[str, bytes]] = {
        "locks/cznabc.lock": b"", "fxgraph/37/fabc/.1234.5678.tmp": b"", "zn/cznabc_CxxBuild/cznabc.o": b"",
        "triton/0/tmp.pid_12_34/kernel.cubin": b"", "7q/__pycache__/c7qabc.cpython-311.pyc": b"",
        "zn/tmpa1b2c3d4": b"", "zn/.x.bin.ck-tmp": b"",
    }

    @pytest.fixture
    def backend(self) -> Backend:
        return InductorBackend()


class SimulatedDevice(BackendConformance):
    """A torch device backend against its simulated package, built on the tiny Flux model."""

    backend_class: ClassVar[type[Backend]]
    tensor_parallel = True

    @pytest.fixture
    def backend(self, simulated_host: Path) -> Backend:
        return self.backend_class()

    @pytest.fixture
    def build_parts(self, simulated_host: Path, tiny_flux_models: Path, tmp_path: Path) -> BuildParts:
        spec = entry(self.backend_class.name, "full")
        return spec, make_tiny_flux(tmp_path / "models", tiny_flux_models), {**self.options, **WARMUP_OPTIONS}


class TestNeuron(SimulatedDevice):
    backend_class = NeuronBackend
    options: ClassVar[dict[str, str]] = {"target": "trn2"}
    artifacts: ClassVar[dict[str, bytes]] = {f"ab/cd/{NEFF_KEY}.neff": b"neff"}
    debris: ClassVar[dict[str, bytes]] = {
        f"ab/cd/{NEFF_KEY[:-1]}f.neff": b"",  # empty: a miss to the runtime
        "ab/cd/.tmp.Xy12Ab": b"partial", f"ab/ce/{NEFF_KEY}.neff": b"wrong shard", f"{NEFF_KEY}.neff": b"top level",
        f"ab/cd/{NEFF_KEY}.neff.lock": b"", f"ab/cd/{NEFF_KEY[:30]}.neff": b"short key",
    }


class TestTPU(SimulatedDevice):
    backend_class = TPUBackend
    options: ClassVar[dict[str, str]] = {"chip": "v6e", "topology": "2x4"}
    # torch-tpu 0.2.0's two name forms: `%016x_%016x_%016x` and `%016x_%016x_%016x_%s` (a non-empty id_key)
    artifacts: ClassVar[dict[str, bytes]] = {f"{K}/{K}_{K}_{K}.bin": b"exe", f"{K}/{K}_{K}_{K}_g.bin": b"with id"}
    debris: ClassVar[dict[str, bytes]] = {
        f"{K}/{K}_{K}_{K[:-1]}0.bin": b"",  # empty: the runtime falls back to compiling
        f"{K}/{K}_{K}_{K}.bin.host-1a2b-3-5f3e2a.0.tmp": b"partial", f"{K}_{K}_{K}.bin": b"no platform dir",
        f"{K}/{K}_{K}_{K}_g.bin.host-1a2b-3-5f3e2a.1.tmp": b"partial", f"{K}/{K}_{K}.bin": b"not a 0.2.0 name",
        f"{K}/{K}_{K}_{K}.bin.lock": b"", "default/x.bin": b"",
    }


class TestNeuronXla(BackendConformance):
    artifacts: ClassVar[dict[str, bytes]] = {
        f"{XLA}/MODULE_1+2/model.neff": b"neff", f"{XLA}/MODULE_1+2/model.done": b"",
        f"{XLA}/MODULE_1+2/compile_flags.json": b"{}",
        # the extended compiler version optimum-neuron 0.4.5 describes: <version>+<commit>
        f"{XLA}+2d4f85be/MODULE_5+6/model.neff": b"neff", f"{XLA}+2d4f85be/MODULE_5+6/model.done": b"",
    }
    debris: ClassVar[dict[str, bytes]] = {
        f"{XLA}/MODULE_1+2/model.neff.lock": b"", f"{XLA}/MODULE_1+2/.tmpab12": b"",
        f"{XLA}/MODULE_3+4/model.neff": b"no done marker: partial",
        "neuronxcc-2.21.0.0/MODULE_1+2/model.neff": b"another compiler",
        "neuronxcc-2.21.0.0/MODULE_1+2/model.done": b"",
        f"{XLA}.1/MODULE_1+2/model.neff": b"a longer version", f"{XLA}.1/MODULE_1+2/model.done": b"",
    }

    @pytest.fixture
    def backend(self, simulated_host: Path) -> Backend:
        return NeuronXlaBackend()

    @pytest.fixture
    def build_parts(self, simulated_host: Path, tmp_path: Path) -> BuildParts:
        existing = tmp_path / "existing"
        for rel, data in self.artifacts.items():
            (existing / rel).parent.mkdir(parents=True, exist_ok=True)
            (existing / rel).write_bytes(data)
        spec = EntrySpec("team-cache", "all", "neuron_xla", "full", Shape(64, 64, 1), "bfloat16")
        return spec, ModelRef("team-cache", "all", path=str(existing)), {}


class TestPluginSimBackend(BackendConformance):
    """A plugin backend, loaded the way an operator names one: CACHEKEEPER_BACKENDS."""

    graph_option = None        # its fingerprint is one env knob (SIM_TOOLCHAIN), whatever the options
    carries_job = False        # its build script reads only the cache dir: it imports nothing of cachekeeper
    artifacts: ClassVar[dict[str, bytes]] = {"00/00000.neff": b"x"}   # it keeps every file a build leaves

    @pytest.fixture
    def backend(self, monkeypatch: pytest.MonkeyPatch) -> Backend:
        clear_device_env(monkeypatch)
        monkeypatch.setenv("CACHEKEEPER_BACKENDS", "sim=benchmarks.sim_backend:SimBackend")
        monkeypatch.setenv("PYTHONPATH", str(REPO))  # the fresh-process fingerprint imports the plugin
        monkeypatch.setenv("SIM_SECONDS", "0")
        from cachekeeper.backends import get_backend

        return get_backend("sim")

    @pytest.fixture
    def build_parts(self, backend: Backend) -> BuildParts:
        spec = EntrySpec("m", "transformer", "sim", "full", Shape(64, 64, 1), "float32")
        return spec, ModelRef("m", "transformer"), {}
