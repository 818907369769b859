"""`BackendConformance`: the contract every backend keeps (backends/base.py), as a pytest suite.

Every backend cachekeeper ships runs it (tests/backends/test_conformance.py), and so can a plugin backend
(`CACHEKEEPER_BACKENDS=name=module:Class`): subclass the suite in a test module, provide `backend` as a
fixture (an instance on a host where it is available, registered under its name), and describe the files
its runtime writes::

    # tests/test_my_backend.py (run with pytest; the suite imports pytest, cachekeeper itself does not)
    import pytest
    from cachekeeper.testing.backends import BackendConformance

    class TestMyBackend(BackendConformance):
        artifacts = {"ab/0123.bin": b"compiled"}    # files in the cache root worth publishing
        debris = {"ab/0123.bin.lock": b""}          # files the runtime leaves there that are not

        @pytest.fixture
        def backend(self, monkeypatch):
            monkeypatch.setenv("CACHEKEEPER_BACKENDS", "mine=my_pkg.backend:MyBackend")
            return MyBackend()

Knobs a subclass may set: `options` (the backend options a config would give), `graph_option` (an option no
field covers, which must change the fingerprint; None when the backend ignores options), `carries_job`
(False when the build command does not pass the job on its command line), `tensor_parallel` (True when a
`tp` entry builds under torchrun), `pin_dist` (which distribution's pin to test; by default the last of the
backend's `dists`, none without), and a `build_parts` fixture returning (entry, model, options) for one
real (or simulated) build, which runs the build command in a subprocess.

A plugin backend's host-side methods (fingerprint, the probes, env_exports, ...) are called behind the
registry's boundary: whatever they raise outside the contract (`ConnectionResetError`, `TimeoutError`,
`KeyError`, a bare `Exception`) ends as one `BackendUnavailable` naming the plugin. The fault tests make the
backend's own method raise each and check that (cachekeeper's own backends are not behind it: skipped).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import pytest

from ..backends import get_backend, modes_for
from ..backends.base import CACHE_ROOT, Backend, BuildJob
from ..backends.toolchain import dist_version, pin_option
from ..errors import BackendUnavailable, describe
from ..format.spec import EntrySpec, ModelRef, Shape

__all__ = ["BackendConformance", "BuildParts"]

BuildParts = tuple[EntrySpec, ModelRef, Mapping[str, str]]

# What the hydrate path must never load: a fingerprint runs there.
HEAVY_MODULES = ("torch", "diffusers", "sqlalchemy")

_FRESH_FINGERPRINT = """
import json, sys
from cachekeeper.backends import get_backend
fp = get_backend(sys.argv[1]).fingerprint(json.loads(sys.argv[2]))
print(json.dumps({"id": fp.id, "heavy": sorted(m for m in sys.argv[3:] if m in sys.modules)}))
"""


class BackendConformance:
    options: ClassVar[Mapping[str, str]] = {}
    graph_option: ClassVar[str | None] = "text_len"
    artifacts: ClassVar[Mapping[str, bytes]] = {}
    debris: ClassVar[Mapping[str, bytes]] = {}
    carries_job: ClassVar[bool] = True
    tensor_parallel: ClassVar[bool] = False
    build_timeout: ClassVar[float] = 600

    @pytest.fixture
    def backend(self) -> Backend:
        raise NotImplementedError("a BackendConformance subclass provides the `backend` fixture")

    @pytest.fixture
    def build_parts(self) -> BuildParts | None:
        """(entry, model, options) of one build to run; None: the suite runs no build."""
        return None

    def pin_dist(self, backend: Backend) -> str | None:
        """A distribution whose `<dist>_version` pin the backend checks; None when it checks no pin."""
        dists: tuple[str, ...] = getattr(backend, "dists", ())
        return dists[-1] if dists else None

    def job(self, backend: Backend, tmp_path: Path, *, tp: int = 1) -> BuildJob:
        """A job as the worker makes it (the command does not read the model: its path need not exist)."""
        options = (("tp", str(tp)),) if tp > 1 else ()
        spec = EntrySpec("m", "transformer", backend.name, backend.modes[0], Shape(64, 64, 1), "float32",
                         options=options)
        roots = {k: str(v) for k, v in backend.build_roots(tmp_path / "w").items()}
        return BuildJob(spec, ModelRef("m", "transformer", path=str(tmp_path / "m")), roots, dict(self.options),
                        str(tmp_path / "w" / "result.json"))

    def fresh_fingerprint(self, backend: Backend) -> dict[str, Any]:
        """The fingerprint a new process computes (as `cachekeeper hydrate` does), and the heavy modules
        that loaded on the way."""
        argv = [sys.executable, "-c", _FRESH_FINGERPRINT, backend.name, json.dumps(dict(self.options)),
                *HEAVY_MODULES]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out: dict[str, Any] = json.loads(proc.stdout)
        return out

    # --- registration --------------------------------------------------------------------------------

    def test_the_registry_returns_this_backend_by_name(self, backend: Backend) -> None:
        assert isinstance(get_backend(backend.name), type(backend))   # a plugin's behind the boundary: a subclass

    # --- faults --------------------------------------------------------------------------------------

    @pytest.mark.parametrize("fault", [ConnectionResetError(104, "Connection reset by peer"),
                                       TimeoutError("timed out"), KeyError("TOOLCHAIN_HOME"), Exception("probe")],
                             ids=lambda e: type(e).__name__)
    @pytest.mark.parametrize("method", ["fingerprint", "unavailable_reason", "env_warnings"])
    def test_a_probe_raising_outside_the_contract_is_one_backend_error_naming_the_plugin(
            self, backend: Backend, method: str, fault: Exception, monkeypatch: pytest.MonkeyPatch) -> None:
        if type(backend).__module__.partition(".")[0] == "cachekeeper":
            pytest.skip("cachekeeper's own backends are not behind the plugin boundary (a bug keeps its traceback)")

        def raises(*args: object, **kwargs: object) -> object:
            raise fault

        own = next(c for c in type(backend).__mro__ if "plugin_origin" not in vars(c))   # not the boundary's
        monkeypatch.setattr(own, method, raises)
        with pytest.raises(BackendUnavailable) as info:
            getattr(get_backend(backend.name), method)(dict(self.options))
        assert info.value.backend == backend.name and info.value.__cause__ is fault
        assert f"failed in {method}(): {describe(fault)}" in info.value.message and "\n" not in info.value.message

    def test_modes_are_declared_and_the_registry_agrees(self, backend: Backend) -> None:
        assert backend.modes and all(isinstance(m, str) and m for m in backend.modes)
        assert "full" in backend.modes  # the config's default mode: every backend builds it
        assert modes_for(backend.name) == backend.modes

    def test_mode_key_options_are_strings_and_full_adds_none(self, backend: Backend) -> None:
        # They go into entry keys on every host, hydrate included: plain strings, and none for the default.
        assert backend.mode_key_options("full") == {}
        for mode in backend.modes:
            for pipeline in (False, True):
                opts = backend.mode_key_options(mode, pipeline=pipeline)
                assert all(isinstance(k, str) and isinstance(v, str) for k, v in opts.items())

    def test_available_on_this_host(self, backend: Backend) -> None:
        # Every other test assumes it: a suite runs where the backend (or its simulation) is installed.
        assert backend.unavailable_reason(self.options) is None

    # --- fingerprint ---------------------------------------------------------------------------------

    def test_fingerprint_is_stable_and_names_its_backend(self, backend: Backend) -> None:
        a, b = backend.fingerprint(self.options), backend.fingerprint(self.options)
        assert a == b and a.id == b.id and a.backend == backend.name

    def test_fingerprint_is_the_same_in_a_fresh_process(self, backend: Backend) -> None:
        assert self.fresh_fingerprint(backend)["id"] == backend.fingerprint(self.options).id

    def test_fingerprint_imports_no_torch_diffusers_or_sqlalchemy(self, backend: Backend) -> None:
        assert self.fresh_fingerprint(backend)["heavy"] == []

    def test_an_option_no_field_covers_changes_the_id(self, backend: Backend) -> None:
        if self.graph_option is None:
            pytest.skip("this backend's fingerprint ignores options")
        changed = backend.fingerprint({**self.options, self.graph_option: "77"})
        assert changed.id != backend.fingerprint(self.options).id

    def test_location_options_do_not_change_the_id(self, backend: Backend) -> None:
        # How many devices a host has and where a cache is imported from say nothing about the toolchain.
        located = backend.fingerprint({**self.options, "cores": "4", "chips": "4", "import_from": "/elsewhere"})
        assert located.id == backend.fingerprint(self.options).id

    # --- pins ----------------------------------------------------------------------------------------

    def test_a_pin_this_host_does_not_meet_is_refused_in_one_line(self, backend: Backend) -> None:
        dist = self.pin_dist(backend)
        if dist is None:
            pytest.skip("this backend checks no version pin")
        with pytest.raises(BackendUnavailable) as exc:
            backend.fingerprint({**self.options, pin_option(dist): "0.0.0.0.0"})
        assert dist in str(exc.value) and "0.0.0.0.0" in str(exc.value) and "\n" not in str(exc.value)

    def test_a_pin_this_host_meets_is_checked_not_recorded(self, backend: Backend) -> None:
        dist = self.pin_dist(backend)
        if dist is None:
            pytest.skip("this backend checks no version pin")
        installed = dist_version(dist)
        assert installed is not None
        pinned = backend.fingerprint({**self.options, pin_option(dist): installed})
        assert pinned == backend.fingerprint(self.options)

    def test_a_pin_of_a_distribution_that_is_not_installed_is_refused(self, backend: Backend) -> None:
        if self.pin_dist(backend) is None:
            pytest.skip("this backend checks no version pin")
        with pytest.raises(BackendUnavailable, match="no-such-dist"):
            backend.fingerprint({**self.options, "no_such_dist_version": "1"})

    # --- roots and env -------------------------------------------------------------------------------

    def test_build_roots_are_under_the_workdir_with_a_cache_root(self, backend: Backend, tmp_path: Path) -> None:
        roots = backend.build_roots(tmp_path)
        # `cache`, directly in the workdir; a relocatable root may pad its name (format/relocate.RESERVED)
        assert roots[CACHE_ROOT].parent == tmp_path and roots[CACHE_ROOT].name.startswith(CACHE_ROOT)
        assert roots[CACHE_ROOT] == tmp_path / CACHE_ROOT or CACHE_ROOT in backend.relocatable_roots
        assert all(p.is_relative_to(tmp_path) for p in roots.values())
        assert backend.shared_roots <= roots.keys()

    def test_extra_roots_never_name_the_cache_root(self, backend: Backend) -> None:
        # The cache root is where the env var points; the others are where the runtime looks by itself.
        assert CACHE_ROOT not in backend.extra_roots(self.options)

    def test_env_exports_point_the_env_var_at_the_hydrated_dir(self, backend: Backend, tmp_path: Path) -> None:
        assert backend.env_exports(tmp_path)[backend.env_var] == str(tmp_path)

    def test_env_warnings_are_single_lines(self, backend: Backend) -> None:
        warnings = backend.env_warnings(self.options)
        assert all(isinstance(w, str) and w and "\n" not in w for w in warnings)

    # --- include -------------------------------------------------------------------------------------

    def test_include_keeps_the_artifacts_and_drops_the_debris(self, backend: Backend, tmp_path: Path) -> None:
        assert self.artifacts, "a BackendConformance subclass names `artifacts`: files its runtime writes"
        cache = backend.build_roots(tmp_path)[CACHE_ROOT]
        files = {**self.artifacts, **self.debris}
        for rel, data in files.items():
            (cache / rel).parent.mkdir(parents=True, exist_ok=True)
            (cache / rel).write_bytes(data)
        kept = {rel for rel in files if backend.include(CACHE_ROOT, rel, cache / rel)}
        assert kept == set(self.artifacts)

    # --- build command -------------------------------------------------------------------------------

    def test_build_command_runs_this_interpreter_with_a_full_env(self, backend: Backend, tmp_path: Path) -> None:
        # The worker runs argv as given, in env as given: the same venv, and the host's PATH and HOME.
        cmd = backend.build_command(self.job(backend, tmp_path))
        assert cmd.argv[0] == sys.executable
        assert cmd.env.get("PATH") == os.environ.get("PATH")

    def test_build_command_round_trips_the_job(self, backend: Backend, tmp_path: Path) -> None:
        if not self.carries_job:
            pytest.skip("this backend's build command does not carry the job")
        job = self.job(backend, tmp_path)
        cmd = backend.build_command(job)
        assert BuildJob.from_json(cmd.argv[-1]) == job

    def test_a_tensor_parallel_entry_builds_under_torchrun(self, backend: Backend, tmp_path: Path) -> None:
        if not self.tensor_parallel:
            pytest.skip("this backend builds on one device")
        argv = backend.build_command(self.job(backend, tmp_path, tp=2)).argv
        # torchrun itself, or a backend's launcher that sets the package's distributed env and then runs it
        assert argv[1] == "-m" and argv[3:5] == ["--standalone", "--nproc_per_node=2"]

    def test_build_devices_is_none_or_a_count(self, backend: Backend) -> None:
        n = backend.build_devices(self.options)
        assert n is None or (isinstance(n, int) and n >= 0)
        assert backend.device_unit

    # --- one build -----------------------------------------------------------------------------------

    def test_a_build_fills_the_cache_root_with_artifacts_it_includes(
            self, backend: Backend, build_parts: BuildParts | None, tmp_path: Path) -> None:
        if build_parts is None:
            pytest.skip("this suite names no build to run")
        spec, model, options = build_parts
        workdir = tmp_path / "w"
        roots = backend.build_roots(workdir)
        for root in roots.values():
            root.mkdir(parents=True, exist_ok=True)
        job = BuildJob(spec, model, {k: str(v) for k, v in roots.items()}, dict(options),
                       str(workdir / "result.json"))
        cmd = backend.build_command(job)
        proc = subprocess.run(cmd.argv, env=cmd.env, cwd=workdir, capture_output=True, text=True,
                              timeout=self.build_timeout, check=False)
        assert proc.returncode == 0, f"build failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        cache = roots[CACHE_ROOT]
        kept = [p for p in cache.rglob("*") if p.is_file()
                and backend.include(CACHE_ROOT, p.relative_to(cache).as_posix(), p)]
        assert kept, f"the build left no artifact `include` keeps in {cache}"
