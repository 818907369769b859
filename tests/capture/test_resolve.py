"""One capture resolution for both entries: `cachekeeper capture` and `cachekeeper.capture` resolve the same
request (captures/resolve.py), so they list the same files and refuse the same input with the same error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cachekeeper
from cachekeeper.captures.resolve import resolve_capture
from cachekeeper.errors import CaptureError, UsageError
from cachekeeper.hydration.destdir import served_dir

from .conftest import World, one_error, runtime_writes


def _without_time(report: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in report.items() if k != "seconds"}


def test_the_cli_and_the_api_report_the_same_capture_of_the_same_dest(world: World) -> None:
    dest = world.tmp / "dest"
    served = world.served(dest)
    runtime_writes(served, "new/b.neff", b"runtime")
    by_cli = json.loads(world.capture(dest, "--json").stdout)
    by_api = cachekeeper.capture(dest, config=world.config, settle=0.05).to_dict()
    assert by_cli["files"] == ["new/b.neff"] and by_cli["dest"] == str(served)
    assert _without_time(by_cli) == _without_time(json.loads(json.dumps(by_api)))


def test_the_request_names_the_served_dir_of_this_toolchain(world: World) -> None:
    dest = world.tmp / "dest"
    served = world.served(dest)
    req = resolve_capture(dest, config=world.config)
    assert req.dest == served == served_dir(dest, req.fingerprint.id)
    assert not req.publish and req.signing_key is None


def test_publishing_without_the_configs_opt_in_is_refused_before_the_dest_is_read(world: World,
                                                                                 tmp_path: Path) -> None:
    """The same UsageError (exit 2) from both entries, even for a dest that was never hydrated."""
    closed = tmp_path / "closed.yaml"
    closed.write_text(world.config.read_text().replace("capture: publish\n", ""))
    nowhere = tmp_path / "nowhere"
    with pytest.raises(UsageError) as refused:
        cachekeeper.capture(nowhere, config=closed, publish=True)
    assert refused.value.exit_code == 2
    proc = world.run("capture", "--config", str(closed), "--dest", str(nowhere), "--publish", ok=False)
    assert proc.returncode == 2 and one_error(proc) == f"error: {refused.value.message}"
    with pytest.raises(CaptureError):   # without --publish, the dest is what is wrong
        cachekeeper.capture(nowhere, config=closed)
