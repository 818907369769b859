"""The schedule xdist workers collect (tests/harness/order.py): the torch files first, whole files only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from tests.harness.order import heavy_first


@dataclass(frozen=True)
class Item:
    path: Path
    name: str
    torch: bool = False

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "torch" and self.torch else None


def names(items: list[Any]) -> list[str]:
    return [f"{i.path.name}::{i.name}" for i in items]


def test_the_torch_files_come_first_whole_and_the_rest_by_test_count() -> None:
    items = [Item(Path("a.py"), "1"), Item(Path("b.py"), "1"), Item(Path("b.py"), "2"),
             Item(Path("c.py"), "1"), Item(Path("c.py"), "2", torch=True), Item(Path("c.py"), "3"),
             Item(Path("d.py"), "1", torch=True)]
    assert names(heavy_first(cast(list[pytest.Item], items))) == [
        "c.py::1", "c.py::2", "c.py::3",   # one torch test makes the file heavy; its tests keep their order
        "d.py::1",                          # heavy files keep collection order among themselves
        "b.py::1", "b.py::2", "a.py::1"]   # then the most tests first, as xdist orders files


def test_the_workers_keep_xdist_from_resorting_the_files(pytestconfig: pytest.Config) -> None:
    if not pytestconfig.pluginmanager.hasplugin("xdist"):
        pytest.skip("pytest-xdist is not installed")
    assert pytestconfig.option.loadscopereorder is False
