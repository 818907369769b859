"""Tiny pipelines (examples/make_tiny_model.py), built once per session: random weights, local tokenizers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.simulated.harness import tiny_models


@pytest.fixture(scope="session")
def pipelines(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder holding tiny-flux2-klein, tiny-flux1, tiny-sd3 and tiny-sdxl pipeline folders."""
    pytest.importorskip("diffusers")
    pytest.importorskip("transformers")
    out = tmp_path_factory.mktemp("tiny-pipelines")
    makers = tiny_models().MAKERS
    for name in ("tiny-flux2-klein", "tiny-flux1", "tiny-sd3", "tiny-sdxl"):
        makers[name](out)
    return out
