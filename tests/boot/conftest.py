"""Fixtures the boot specifications share."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from cachekeeper.hydration.engine import HydrateReport


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The keyword arguments of every `hydrate` the CLI calls; each call "places" what its pins name."""
    calls: list[dict[str, Any]] = []

    def spy(**kw: Any) -> HydrateReport:
        calls.append(kw)
        return HydrateReport(dest=kw["dest"], fingerprint_id="f", manifests=[p.name for p in kw["pins"] or ()])

    monkeypatch.setattr(sys.modules["cachekeeper.hydration.engine"], "hydrate", spy)
    return calls
