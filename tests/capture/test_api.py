"""The Python API: `cachekeeper.hydrate(...) -> HydrateReport`, `cachekeeper.env(...)`, `cachekeeper.capture(...)`,
behaving as the CLI does, and an `import cachekeeper` that loads nothing else."""

from __future__ import annotations

import subprocess
import sys

import pytest

import cachekeeper
from cachekeeper.captures.capture import CaptureReport
from cachekeeper.errors import CachekeeperError, CaptureError, NothingToHydrate
from cachekeeper.hydration.engine import HydrateReport
from cachekeeper.reports.fleet import hydrate_counts

from .conftest import World, runtime_writes


@pytest.fixture()
def host(world: World, monkeypatch: pytest.MonkeyPatch) -> World:
    monkeypatch.setenv("FAKE_SHARED_DIR", str(world.tmp / "shared"))
    monkeypatch.delenv("FAKE_TOOLCHAIN", raising=False)
    return world


def test_import_cachekeeper_loads_only_the_package() -> None:
    code = ("import sys, cachekeeper\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "{'cachekeeper', 'torch', 'sqlalchemy', 'click', 'typing', 'boto3'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['cachekeeper']"


def test_the_api_functions_stay_functions_after_the_boot_modules_load() -> None:
    import cachekeeper.captures.capture
    import cachekeeper.hydration.engine

    for name in ("hydrate", "capture", "env"):
        function = getattr(cachekeeper, name)
        assert callable(function) and function.__module__ == "cachekeeper.api", name
    assert cachekeeper.HydrateReport is HydrateReport and cachekeeper.CaptureReport is CaptureReport


def test_hydrate_env_and_capture_from_python(host: World) -> None:
    dest = host.tmp / "dest"
    report = cachekeeper.hydrate(config=host.config, dest=dest, store=host.store_url)
    assert isinstance(report, HydrateReport) and report.files_fetched == 3 and not report.missing
    assert hydrate_counts(report.manifests, report.missing) == {"hit": 1, "missed": 0, "captured": 0}
    assert report.dest == dest / report.fingerprint_id   # the toolchain's own dir (hydration/destdir.py)
    assert cachekeeper.env(config=host.config, dest=dest) == {"FAKE_CACHE_DIR": str(report.dest)}
    dest = report.dest

    runtime_writes(dest, "new/b.neff", b"runtime")
    listed = cachekeeper.capture(dest, config=host.config, settle=0.05)
    assert isinstance(listed, CaptureReport) and listed.files == ["new/b.neff"] and listed.manifest is None
    published = cachekeeper.capture(dest, config=host.config, publish=True, store=host.store_url, settle=0.05)
    assert published.created and published.manifest and published.manifest.startswith("captured/")

    again = cachekeeper.hydrate(config=host.config, dest=host.tmp / "dest2", store=host.store_url)
    assert hydrate_counts(again.manifests, again.missing) == {"hit": 1, "missed": 0, "captured": 1}


def test_the_api_raises_the_cli_errors_with_their_exit_codes(host: World) -> None:
    with pytest.raises(CaptureError) as never:
        cachekeeper.capture(host.tmp / "nowhere", config=host.config)
    assert never.value.exit_code == 12 and never.value.hint
    (host.store_dir / "manifests").rename(host.tmp / "gone")
    with pytest.raises(NothingToHydrate) as empty:
        cachekeeper.hydrate(config=host.config, dest=host.tmp / "d", store=host.store_url, require_all=True)
    assert isinstance(empty.value, CachekeeperError) and empty.value.exit_code == 8


def test_the_api_is_typed() -> None:
    """The annotations resolve to the report classes (what a user's type checker sees; mypy --strict runs
    over cachekeeper/ in scripts/test)."""
    import typing

    import cachekeeper.api as api

    reports = {"HydrateReport": HydrateReport, "CaptureReport": CaptureReport}  # imported for type checkers only
    assert typing.get_type_hints(api.hydrate, localns=reports)["return"] is HydrateReport
    assert typing.get_type_hints(api.capture, localns=reports)["return"] is CaptureReport
    assert typing.get_type_hints(api.env, localns=reports)["return"] == dict[str, str]


def test_a_bounded_best_effort_hydrate_boots_past_a_dead_store(host: World, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "k",
                        "AWS_SECRET_ACCESS_KEY": "s", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    dead = {"config": host.config, "store": "s3://bucket/ck", "deadline": 20.0}
    report = cachekeeper.hydrate(dest=host.tmp / "a", best_effort=True, **dead)  # type: ignore[arg-type]
    assert report.incomplete and report.files_fetched == 0
    with pytest.raises(CachekeeperError):
        cachekeeper.hydrate(dest=host.tmp / "b", **dead)  # type: ignore[arg-type]


def test_the_api_applies_the_configs_hydrate_settings_as_the_cli_does(host: World) -> None:
    missing_store = f"file://{host.tmp / 'no-such-store'}"
    with pytest.raises(CachekeeperError):
        cachekeeper.hydrate(config=host.config, dest=host.tmp / "a", store=missing_store)
    host.config.write_text(host.config.read_text() + "hydrate:\n  best_effort: true\n")
    report = cachekeeper.hydrate(config=host.config, dest=host.tmp / "b", store=missing_store)
    assert report.incomplete and report.files_fetched == 0   # the server starts and compiles what it needs


def test_capture_and_hydrate_close_the_store_they_opened(host: World, monkeypatch: pytest.MonkeyPatch) -> None:
    from cachekeeper.stores.file import FileStore

    closed: list[str] = []
    monkeypatch.setattr(FileStore, "close", lambda self: closed.append(self.url))
    dest = host.tmp / "dest"
    dest = cachekeeper.hydrate(config=host.config, dest=dest, store=host.store_url).dest
    assert len(closed) == 1
    runtime_writes(dest, "new/c.neff", b"runtime")
    cachekeeper.capture(dest, config=host.config, settle=0.05)   # no --publish: no store opened, none closed
    assert len(closed) == 1
    cachekeeper.capture(dest, config=host.config, publish=True, store=host.store_url, settle=0.05)
    assert len(closed) == 2
