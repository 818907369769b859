"""Tiny pipelines (examples/make_tiny_model.py): random weights, local tokenizers. Built once per run, shared
by every worker (tests/harness/tiny.py); read-only: a test that writes next to them copies them first."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def pipelines(tiny_pipelines: Path) -> Path:
    """The folder holding tiny-flux2-klein, tiny-flux1, tiny-sd3 and tiny-sdxl pipeline folders."""
    return tiny_pipelines
