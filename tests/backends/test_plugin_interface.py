"""The plugin interface stays importable where plugins found it: old spellings work, or warn with the new one."""

from __future__ import annotations

from types import ModuleType

import pytest

from cachekeeper.backends import base, build_main, toolchain
from cachekeeper.format import spec


def test_model_ref_is_still_importable_from_the_backend_contract() -> None:
    assert base.ModelRef is spec.ModelRef


@pytest.mark.parametrize(("name", "home"), [("PackagedBackend", toolchain), ("check_pins", toolchain),
                                            ("load_component", build_main), ("build_main", build_main)])
def test_a_helper_of_the_old_common_module_warns_with_its_new_home(name: str, home: ModuleType) -> None:
    from cachekeeper.backends import _common

    with pytest.warns(DeprecationWarning, match=rf"import it from {home.__name__}"):
        found = getattr(_common, name)
    assert found is getattr(home, name)


def test_a_name_the_old_module_never_had_is_an_attribute_error() -> None:
    from cachekeeper.backends import _common

    with pytest.raises(AttributeError):
        _common.no_such_helper  # noqa: B018
