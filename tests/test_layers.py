"""The layers hold (pyproject's [tool.importlinter] contracts, one row each in docs/architecture.md), and each
contract fails when its rule is broken: a contract that cannot fail would guard nothing."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "cachekeeper"
LINT = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True))"
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]

# One import per contract that the contract must refuse: (file, the line appended to it, the contract). Each
# breaks its own contract and no other (a chain through it must not reach another contract's forbidden
# modules), so a contract whose rule stopped working cannot hide behind another's failure.
VIOLATIONS = [
    ("stores/memory.py", "from ..cli import hints", "the CLI is above the library"),
    ("dashboard/params.py", "from ..hydration import plan", "only the CLI, api.py and admin/ reach into the hydrate"),
    ("hydration/destdir.py", "from . import engine", "the dest's records import none of the hydrate engine"),
    ("hydration/plan.py", "from ..catalog import db", "the hydrate path never imports the build side"),
    ("worker/shard.py", "from ..hydration import state", "the build side never imports hydration"),
    ("backends/neuron/counters.py", "from ...stores import memory", "backends never import the catalog, the stores"),
    ("catalog/queue.py", "from ..admin import gc", "the catalog never imports admin/ or hydration"),
    ("inspection/suggest.py", "from ..hydration import state", "inspection never imports hydration"),
    ("reports/fleet.py", "from ..catalog import rows", "reports never import hydration, captures or the catalog"),
    ("publish/snapshot.py", "from ..reports import fleet", "publish never imports hydration or captures"),
    ("runtime/pipeline.py", "from ..captures import capture", "the runtime never imports captures"),
    ("stores/url.py", "from ..backends import toolchain", "stores import neither the catalog nor the backends"),
    ("stores/base.py", "from . import reader", "the store contract imports no store and not the read side"),
    ("format/signing.py", "from ..stores import base", "format imports nothing above it"),
    ("fs/locks.py", "from ..format import layout", "fs imports nothing of cachekeeper but errors"),
]


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(root), "PATH": "", "COLUMNS": "400"}  # wide: one line per contract
    return subprocess.run([sys.executable, "-c", LINT], cwd=root, env=env, capture_output=True, text=True, timeout=120)


def sections(report: str) -> dict[str, str]:
    """The "Broken contracts" part of a report, by contract name: each name is underlined with dashes."""
    broken = report.split("Broken contracts", 1)[-1]
    parts = re.split(r"^(.+)\n-+\n", broken, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_every_layer_contract_is_kept() -> None:
    proc = lint(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout and proc.stdout.count(" KEPT") == len(CONTRACTS) == len(VIOLATIONS)


def test_each_contract_catches_an_import_that_breaks_it(tmp_path: Path) -> None:
    assert sorted(c for _, _, c in VIOLATIONS) == sorted({c for _, _, c in VIOLATIONS})   # one per contract
    for _, _, contract in VIOLATIONS:
        assert sum(c["name"].startswith(contract) for c in CONTRACTS) == 1, contract
    shutil.copytree(PKG, tmp_path / "cachekeeper", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for path, line, _ in VIOLATIONS:
        with (tmp_path / "cachekeeper" / path).open("a") as f:
            f.write(f"\n{line}  # noqa\n")
    proc = lint(tmp_path)
    assert proc.returncode != 0
    assert len([line for line in proc.stdout.splitlines() if " BROKEN" in line]) == len(VIOLATIONS), proc.stdout
    broken = sections(proc.stdout)
    for path, _, contract in VIOLATIONS:
        [name] = [n for n in broken if n.startswith(contract)]
        module = "cachekeeper." + path.removesuffix(".py").replace("/", ".")
        assert module in broken[name], (contract, module, broken[name])   # broken by this import, not another


def _contract(name: str) -> dict[str, list[str]]:
    [contract] = [c for c in CONTRACTS if c["name"] == name]
    return contract


def test_every_hydration_module_is_public_or_the_engines_inside() -> None:
    """hydration/'s public surface is the dest's records (the sources of the second contract below); every
    other module is protected. A new module must be put on one side, or it would slip past both."""
    protected = set(_contract("only the CLI, api.py and admin/ reach into the hydrate engine")["protected_modules"])
    public = set(_contract("the dest's records import none of the hydrate engine")["source_modules"])
    assert protected == set(_contract("the dest's records import none of the hydrate engine")["forbidden_modules"])
    assert public == {"cachekeeper.hydration.state", "cachekeeper.hydration.destdir"}
    modules = {f"cachekeeper.hydration.{p.stem}" for p in (PKG / "hydration").glob("*.py") if p.stem != "__init__"}
    assert not protected & public
    assert modules == protected | public


def imported_modules(path: Path, package: str) -> set[str]:
    """Every module a file imports, wherever the import sits: at the top, in a function or under
    TYPE_CHECKING (import-linter leaves the last out, and a cycle dodged there is still a cycle)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            mod = ".".join(p for p in (base, node.module or "") if p)
            out.update(f"{mod}.{a.name}" for a in node.names)
            out.add(mod)
    return out


CONTRACT_NAMES = ("cachekeeper.stores.base.", "cachekeeper.stores.url.")   # names imported from the contract


def store_contract_problems(root: Path) -> list[str]:
    """The store contract (stores/base.py, stores/url.py) imports no other stores/ module, not even for a
    type: stores/reader.py imports base, so base importing reader would be the cycle the layers removed."""
    problems = []
    for name in ("base", "url"):
        for mod in sorted(imported_modules(root / "stores" / f"{name}.py", "cachekeeper.stores")):
            inside = mod in ("cachekeeper.stores.base", "cachekeeper.stores.url") or mod.startswith(CONTRACT_NAMES)
            if mod.startswith("cachekeeper.stores.") and not inside:
                problems.append(f"stores/{name}.py imports {mod}")
    return problems


def test_the_store_contract_imports_no_store_even_for_a_type(tmp_path: Path) -> None:
    assert store_contract_problems(PKG) == []
    assert "cachekeeper.stores.base" in imported_modules(PKG / "stores" / "reader.py", "cachekeeper.stores")
    shutil.copytree(PKG / "stores", tmp_path / "stores", ignore=shutil.ignore_patterns("__pycache__"))
    with (tmp_path / "stores" / "base.py").open("a") as f:
        f.write("\nif TYPE_CHECKING:\n    from .reader import Deadline\n")
    assert store_contract_problems(tmp_path) == ["stores/base.py imports cachekeeper.stores.reader",
                                                 "stores/base.py imports cachekeeper.stores.reader.Deadline"]
