"""Tiny pipelines (examples/make_tiny_model.py), built once per session: random weights, local tokenizers."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def tiny_models() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_tiny_model", REPO / "examples" / "make_tiny_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
