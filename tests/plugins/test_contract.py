"""The plugin contract holds: a plugin imports only the names `cachekeeper.backends.base` and
`cachekeeper.stores.base` export (their `__all__`, which the docs' import lines repeat), plus the shipped
conformance suites for its tests. Every plugin in this repository is held to it, and one written against
the old layout still loads, warned, for one release."""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

import pytest

from .distributions import HERE, REPO

CONTRACTS = ("cachekeeper.backends.base", "cachekeeper.stores.base", "cachekeeper.testing.backends",
             "cachekeeper.testing.stores")
PLUGINS = sorted([*HERE.glob("*/**/*.py"), REPO / "benchmarks" / "sim_backend.py", REPO / "tests" / "fakes.py"])


def documented(module: str) -> set[str]:
    return set(importlib.import_module(module).__all__)


def outside_the_contract(source: str) -> list[str]:
    """Each import of cachekeeper in `source` that is not a documented name of a contract module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.split(".")[0] == "cachekeeper"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "cachekeeper":
            module = node.module or ""
            allowed = documented(module) if module in CONTRACTS else set()
            found += [f"from {module} import {a.name}" for a in node.names if a.name not in allowed]
    return found


@pytest.mark.parametrize("plugin", PLUGINS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_a_plugin_imports_only_documented_names(plugin: Path) -> None:
    assert outside_the_contract(plugin.read_text()) == []


@pytest.mark.parametrize(("line", "flagged"), [
    ("from cachekeeper.format.fingerprint import Fingerprint", True),    # where it lives is not the contract
    ("from cachekeeper.fingerprint import Fingerprint", True),           # the deprecated place
    ("import cachekeeper.stores.s3", True),
    ("from cachekeeper.backends.base import Backend, os", True),          # base imports os; it does not export it
    ("from cachekeeper.stores.base import Store, StoreURL, check_key", False),
    ("from cachekeeper.backends.base import Backend, Fingerprint", False),
])
def test_the_check_flags_an_import_outside_the_contract(line: str, flagged: bool) -> None:
    assert bool(outside_the_contract(line)) is flagged


@pytest.mark.parametrize(("doc", "module"), [
    ("docs/backends.md", "cachekeeper.backends.base"),
    ("docs/stores.md", "cachekeeper.stores.base"),
])
def test_the_docs_import_line_names_exactly_the_contract(doc: str, module: str) -> None:
    blocks = re.findall(r"```python\n(.*?)```", (REPO / doc).read_text(), re.S)
    lines = [node for block in blocks for node in ast.walk(ast.parse(block))
             if isinstance(node, ast.ImportFrom) and node.module == module and len(node.names) > 2]
    assert len(lines) == 1, f"{doc} shows the contract as one `from {module} import (...)` in a python block"
    assert {a.name for a in lines[0].names} == documented(module)


def test_fingerprint_is_in_the_backend_contract() -> None:
    from cachekeeper.backends import base
    from cachekeeper.format.fingerprint import Fingerprint

    assert base.Fingerprint is Fingerprint and "Fingerprint" in base.__all__


def test_the_old_fingerprint_module_still_imports_with_a_warning_naming_the_new_place(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "cachekeeper.fingerprint", raising=False)
    with pytest.warns(DeprecationWarning, match=r"import Fingerprint from cachekeeper\.backends\.base"):
        old = importlib.import_module("cachekeeper.fingerprint")
    from cachekeeper.backends.base import Fingerprint

    assert old.Fingerprint is Fingerprint


def test_it_is_the_only_deprecation_shim() -> None:
    warns = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "cachekeeper").rglob("*.py")
                   if "DeprecationWarning" in p.read_text())
    assert warns == ["cachekeeper/fingerprint.py"]


def test_the_store_contract_imports_nothing_of_its_package_but_the_url_values() -> None:
    """stores/base.py is what every store and the read side build on: it imports none of them, not even for
    type checking (import-linter skips those; the contract in pyproject covers the rest)."""
    tree = ast.parse((REPO / "cachekeeper" / "stores" / "base.py").read_text())
    siblings = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 1}
    assert siblings == {"url"}
    assert "TYPE_CHECKING" not in {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
