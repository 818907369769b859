"""Every `CACHEKEEPER_*` variable is named once, in `cachekeeper/settings.py`: the docs list exactly the
registry's user-facing variables as it renders them, every variable the README, the docs, the deploy units
and the examples name is registered, no module but the registry spells a variable's name in code, and every
click option that reads a variable reads a registered one, which lists that option's flag.
"""

from __future__ import annotations

import ast
import fnmatch
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import click
import pytest

from cachekeeper import settings
from cachekeeper.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cachekeeper"
VARIABLE = re.compile(r"CACHEKEEPER_[A-Z0-9_]*[A-Z0-9]")
REGISTERED = {s.name: s for s in settings.REGISTRY}
USER_FACING = {s.name for s in settings.REGISTRY if not s.internal}
# Files being rewritten on another branch (the hydrate options): they still spell variables as literals.
# The lead converts them after the merge and then empties this list.
NOT_YET_CONVERTED: tuple[str, ...] = ()   # every reader goes through cachekeeper.settings


# --- the registry against the docs -------------------------------------------------------------------------

def docs_table() -> dict[str, str]:
    """Name -> row of docs/config.md's "Environment variables" table."""
    text = (ROOT / "docs" / "config.md").read_text()
    section = text.split("\n## Environment variables\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `CACHEKEEPER_")]
    return {line.split("`")[1]: line for line in rows}


def test_the_docs_table_lists_every_user_facing_variable_as_the_registry_renders_it() -> None:
    table = docs_table()
    assert set(table) == USER_FACING, (f"missing from docs/config.md: {sorted(USER_FACING - set(table))}; "
                                       f"not registered or internal: {sorted(set(table) - USER_FACING)}")
    rendered = {row.split("`")[1]: row for row in settings.markdown_table().splitlines()[2:]}
    stale = [name for name in table if table[name] != rendered[name]]
    assert not stale, f"rows that differ from `python -m cachekeeper.settings`: {stale}"


def named_in_docs() -> dict[str, set[str]]:
    """Variable -> the files of README.md, docs/*.md, deploy/ and examples/ that name it (read now, so a
    reference that moves from the README to a new docs page stays covered)."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    files += [p for top in ("deploy", "examples") for p in sorted((ROOT / top).rglob("*")) if p.is_file()]
    named: dict[str, set[str]] = defaultdict(set)
    for path in files:
        for name in VARIABLE.findall(path.read_text(errors="replace")):
            named[name].add(str(path.relative_to(ROOT)))
    return named


def test_every_variable_the_readme_docs_deploy_units_and_examples_name_is_registered() -> None:
    named = named_in_docs()
    assert {"CACHEKEEPER_STORE", "CACHEKEEPER_SPOOL", "CACHEKEEPER_CONFIG"} <= set(named)   # the scan reads them
    unknown = {name: sorted(where) for name, where in named.items() if name not in REGISTERED}
    assert not unknown, f"named but not in cachekeeper/settings.py: {unknown}"


# --- the code: only the registry spells a variable ----------------------------------------------------------

def docstrings(tree: ast.Module) -> set[int]:
    """ids of the docstring constants (module, class, function)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def spelled_variables(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string in code whose whole value is a variable's name, and of each `envvar=`
    given a string: comments, docstrings and help text that mention a variable are prose, not reads."""
    tree = ast.parse(source)
    skip = docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
                and VARIABLE.fullmatch(node.value)):
            found.append((node.lineno, node.value))
        elif (isinstance(node, ast.keyword) and node.arg == "envvar" and isinstance(node.value, ast.Constant)
              and not VARIABLE.fullmatch(str(node.value.value))):
            found.append((node.value.lineno, f"envvar={node.value.value!r}"))
    return found


def test_the_scan_finds_a_spelled_variable_and_passes_prose() -> None:
    code = ('"""Reads CACHEKEEPER_HOME."""\nimport os\n# CACHEKEEPER_STORE\n'
            'x = os.environ.get("CACHEKEEPER_HOME")\nopt(envvar="OTHER", help="[env CACHEKEEPER_STORE]")\n'
            'def f():\n    """CACHEKEEPER_STORE"""\n    return {"CACHEKEEPER_SPOOL": 1}\n')
    assert spelled_variables(code) == [(4, "CACHEKEEPER_HOME"), (5, "envvar='OTHER'"), (8, "CACHEKEEPER_SPOOL")]


def test_no_module_but_the_registry_spells_a_variable_in_code() -> None:
    spelled = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel == "cachekeeper/settings.py" or any(fnmatch.fnmatch(rel, p) for p in NOT_YET_CONVERTED):
            continue
        if found := spelled_variables(path.read_text()):
            spelled[rel] = found
    assert not spelled, f"read these through cachekeeper.settings (settings.X.get(), envvar=settings.X.name): {spelled}"


# --- the CLI: every option that reads a variable reads a registered one ------------------------------------

def envvar_flags() -> dict[str, set[str]]:
    """Variable -> the flags whose options read it, over the whole command tree (groups included)."""
    from cachekeeper.cli import _register, cli

    _register()
    found: dict[str, set[str]] = defaultdict(set)

    def walk(command: click.Command) -> None:
        for param in command.params:
            if isinstance(param, click.Option) and param.envvar:
                for var in [param.envvar] if isinstance(param.envvar, str) else param.envvar:
                    found[var].add(max(param.opts, key=len))
        for sub in command.commands.values() if isinstance(command, click.Group) else ():
            walk(sub)

    walk(cli)
    return found


def test_every_option_that_reads_a_variable_reads_a_registered_one_that_lists_its_flag() -> None:
    read = envvar_flags()
    assert {"CACHEKEEPER_LOG_FORMAT", "CACHEKEEPER_STORE", "CACHEKEEPER_DEADLINE"} <= set(read)  # groups too
    unknown = sorted(set(read) - set(REGISTERED))
    assert not unknown, f"options read variables cachekeeper/settings.py does not name: {unknown}"
    wrong = {s.name: (sorted(s.flags), sorted(read.get(s.name, ()))) for s in settings.REGISTRY
             if set(s.flags) != read.get(s.name, set())}
    assert not wrong, f"Setting.flags vs the options that read the variable: {wrong}"
    hidden = [s.name for s in settings.REGISTRY if (s.internal or s.deploy_only) and s.name in read]
    assert not hidden, f"internal or deploy-only variables a flag reads: {hidden}"


# --- the readers -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("setting", "raw", "message", "hint"), [
    (settings.STALL_TIMEOUT, "abc", "env CACHEKEEPER_STALL_TIMEOUT: 'abc' is not a number",
     "give env CACHEKEEPER_STALL_TIMEOUT a number > 0 and <= 3600 seconds"),
    (settings.STALL_TIMEOUT, "0", "env CACHEKEEPER_STALL_TIMEOUT: 0 is too small",
     "give env CACHEKEEPER_STALL_TIMEOUT a number > 0 and <= 3600 seconds"),
    (settings.PART_MIB, "5000", "env CACHEKEEPER_PART_MIB: 5000 is past the bound of 4096",
     "give env CACHEKEEPER_PART_MIB a number >= 0 and <= 4096 MiB"),
    (settings.S3_ADDRESSING_STYLE, "sideways",
     "env CACHEKEEPER_S3_ADDRESSING_STYLE: 'sideways' is not one of auto, path, virtual",
     "set CACHEKEEPER_S3_ADDRESSING_STYLE to auto, path or virtual, or unset it"),
    (settings.MAX_BYTES, "1.5G", "env CACHEKEEPER_MAX_BYTES must be a byte count from 1 to 2**60 (e.g. 20G), got "
     "'1.5G' (a fraction: bytes are whole)", None),
    (settings.BEST_EFFORT, "maybe", "env CACHEKEEPER_BEST_EFFORT: 'maybe' is not a boolean",
     "set CACHEKEEPER_BEST_EFFORT to 1 or 0, or unset it"),
])
def test_a_bad_value_is_one_error_naming_the_variable_and_its_bound(
        setting: settings.Setting[object], raw: str, message: str, hint: str | None) -> None:
    with pytest.raises(UsageError) as caught:
        setting.get({setting.name: raw})
    assert caught.value.message == message
    if hint is not None:
        assert caught.value.hint == hint


def test_a_reader_types_the_value_and_unset_or_blank_is_none() -> None:
    env = {"CACHEKEEPER_STALL_TIMEOUT": " 2.5 ", "CACHEKEEPER_BACKENDS": "a=m:A,,b=n:B", "CACHEKEEPER_SPOOL": "/s",
           "CACHEKEEPER_TRUSTED_KEYS": "k1  k2", "CACHEKEEPER_BEST_EFFORT": "Yes",
           "CACHEKEEPER_S3_ADDRESSING_STYLE": " Path", "CACHEKEEPER_BUILD_WARNINGS": "one\n\ntwo",
           "CACHEKEEPER_SERVE_CALL": '{"steps": 2}', "CACHEKEEPER_METRICS_PORT": "9100", "CACHEKEEPER_MODEL": " "}
    assert settings.STALL_TIMEOUT.get(env) == 2.5
    assert settings.METRICS_PORT.get(env) == 9100
    assert settings.BACKENDS.get(env) == ("a=m:A", "b=n:B")
    assert settings.TRUSTED_KEYS.get(env) == ("k1", "k2")
    assert settings.BUILD_WARNINGS.get(env) == ("one", "two")
    assert settings.BEST_EFFORT.get(env) is True
    assert settings.S3_ADDRESSING_STYLE.get(env) == "path"
    assert settings.SPOOL.get(env) == Path("/s")
    assert settings.SERVE_CALL.get(env) == {"steps": 2}
    assert settings.MODEL.get(env) is None and settings.HOME.get(env) is None


def test_check_environment_refuses_each_variable_no_flag_reads() -> None:
    from cachekeeper.bounds import check_environment

    entry = {s.name for s in settings.CHECKED_AT_ENTRY}
    assert entry == {"CACHEKEEPER_STALL_TIMEOUT", "CACHEKEEPER_PART_MIB", "CACHEKEEPER_S3_ADDRESSING_STYLE",
                     "CACHEKEEPER_STRICT"}
    check_environment({})
    for name in entry:
        with pytest.raises(UsageError, match=f"env {name}:"):
            check_environment({name: "-1"})


def test_the_documented_defaults_and_choices_are_the_code_s(monkeypatch: pytest.MonkeyPatch) -> None:
    from cachekeeper.backends.tpu.launch import lock_path
    from cachekeeper.backends.tpu.probes import TIER2_BASE, tier2_base
    from cachekeeper.config import hydrate as hydrate_options
    from cachekeeper.fs import durability
    from cachekeeper.observability import logs
    from cachekeeper.stores import default_home
    from cachekeeper.stores.reader import RetryPolicy, default_policy

    for s in settings.REGISTRY:
        monkeypatch.delenv(s.name, raising=False)

    def default(s: settings.Setting[object]) -> str:
        return s.default.strip("`")

    assert default(settings.STALL_TIMEOUT) == f"{default_policy().stall:g}" == f"{RetryPolicy.stall:g}"
    assert default(settings.HOME) == "./.cachekeeper" and default_home() == Path(".cachekeeper").absolute()
    assert default(settings.TPU_TIER2_BASE) == TIER2_BASE and tier2_base({}) == Path(TIER2_BASE)
    assert lock_path() == Path(default(settings.TPU_CHIP_LOCK).replace("$TMPDIR", tempfile.gettempdir()))
    assert settings.DURABILITY.choices == durability.MODES and default(settings.DURABILITY) in durability.MODES
    assert settings.NODE_CACHE_LINK.choices == hydrate_options.LINK_MODES
    from cachekeeper.cli import cli

    [log_format] = [p for p in cli.params if p.name == "log_format"]
    assert settings.LOG_FORMAT.choices == logs.FORMATS and default(settings.LOG_FORMAT) == log_format.default
    part_mib = subprocess.run([sys.executable, "-c", "from cachekeeper.hydration.fetch import PART; print(PART)"],
                              capture_output=True, text=True, check=True, env=dict(os.environ)).stdout
    assert int(part_mib) == int(default(settings.PART_MIB)) << 20


def test_the_registry_is_light_enough_for_the_boot_path() -> None:
    code = "import sys, cachekeeper.settings; print(sorted(m for m in sys.modules if m.startswith('cachekeeper')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "['cachekeeper', 'cachekeeper.bounds', 'cachekeeper.errors', 'cachekeeper.settings']"
