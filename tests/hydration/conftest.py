"""Fixtures the boot specifications share."""

from __future__ import annotations

import sys
from dataclasses import asdict
from typing import Any

import pytest

from cachekeeper.config.hydrate import HydrateOptions
from cachekeeper.hydration.engine import HydrateReport, Target


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The target's and the options' fields of every engine `hydrate` the CLI calls, as one dict per call;
    each call "places" what its pins name."""
    calls: list[dict[str, Any]] = []

    def spy(target: Target, options: HydrateOptions, *args: Any, **kw: Any) -> HydrateReport:
        calls.append({**vars(target), **asdict(options)})
        return HydrateReport(dest=target.dest, fingerprint_id="f", manifests=[p.name for p in target.pins or ()])

    monkeypatch.setattr(sys.modules["cachekeeper.hydration.engine"], "hydrate", spy)
    return calls
