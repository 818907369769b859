"""The plugin interface stays importable where plugins found it."""

from __future__ import annotations

from cachekeeper.backends import base
from cachekeeper.format import spec


def test_model_ref_is_still_importable_from_the_backend_contract() -> None:
    assert base.ModelRef is spec.ModelRef
