from __future__ import annotations

import pytest

from tests.fakes import ENABLE


@pytest.fixture(autouse=True)
def fake_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """Configs name the fake backend (tests/fakes.py); in-process parsing needs it registered too."""
    for k, v in ENABLE.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("FAKE_TOOLCHAIN", raising=False)
