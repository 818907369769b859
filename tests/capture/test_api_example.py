"""The Python API example, taken from docs/boot.md as written (only its dest path moved into the test's
tmp dir), runs against a real file store: the env it sets names the dir hydrate filled, and what the
runtime writes there is what capture publishes."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from .conftest import World, runtime_writes

DOC = Path(__file__).resolve().parents[2] / "docs" / "boot.md"


def api_example() -> tuple[str, str]:
    """(the code before the example's `...` line, the code after it): the one python block that calls
    `cachekeeper.hydrate(`."""
    [block] = [b for b in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S) if "cachekeeper.hydrate(" in b]
    before, serve, after = re.split(r"^(\.\.\..*)$", block, maxsplit=1, flags=re.M)
    assert serve.startswith("...")
    return before, after


def test_the_documented_python_example_runs_as_written(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    before, after = api_example()
    assert '"/var/cache/ck"' in before and 'config="ck.yaml"' in before
    dest = world.tmp / "var-cache-ck"
    for name in ("CACHEKEEPER_HOME", "CACHEKEEPER_STORE", "FAKE_SHARED_DIR"):
        monkeypatch.setenv(name, world.vars[name])
    monkeypatch.delenv("FAKE_CACHE_DIR", raising=False)
    monkeypatch.chdir(world.tmp)                                   # the example's ck.yaml
    scope: dict[str, object] = {}
    exec(before.replace('"/var/cache/ck"', repr(str(dest))), scope)
    served = Path(os.environ["FAKE_CACHE_DIR"])
    report = scope["report"]
    assert served == report.dest == dest / report.fingerprint_id  # type: ignore[attr-defined]
    assert sorted(p.name for p in served.rglob("*.neff")) == ["k0.neff", "k1.neff", "k2.neff"]
    runtime_writes(served, "new/graph.neff", b"compiled by the server")   # the `...`: serving compiles
    exec(after, scope)
    captured = scope["captured"]
    assert captured.files == ["new/graph.neff"] and captured.manifest  # type: ignore[attr-defined]
    assert world.captured_keys() == [f"manifests/{report.fingerprint_id}/{captured.manifest}.json"]  # type: ignore[attr-defined]
