"""The CLI's hint table (cli/hints.py) against the error classes, the real click tree and docs/cli.md.

Every error class gets a next step; every flag a hint or a library message names exists; the exit codes
are the ones docs/cli.md's exit-code table promises; the error handler prints `error:` and `hint:` and exits
with the code.
"""

from __future__ import annotations

import ast
import re
import string
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from cachekeeper import errors
from cachekeeper.cli import _Group, _register, cli
from cachekeeper.cli.hints import HINTS, hint_for, row_for

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cachekeeper"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
FIELDS = {"key", "url", "path", "fingerprint"}


def _subclasses(cls: type[errors.CachekeeperError]) -> Iterator[type[errors.CachekeeperError]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


ERROR_CLASSES = sorted(set(_subclasses(errors.CachekeeperError)), key=lambda c: c.__name__)


def _commands() -> dict[tuple[str, ...], set[str]]:
    """Every command path of the real CLI (() is the group itself) -> the option names it accepts."""
    _register()
    out: dict[tuple[str, ...], set[str]] = {}

    def walk(cmd: click.Command, path: tuple[str, ...]) -> None:
        ctx = click.Context(cmd, info_name=path[-1] if path else "cachekeeper", help_option_names=["-h", "--help"])
        out[path] = {o for p in cmd.get_params(ctx) if isinstance(p, click.Option) for o in p.opts + p.secondary_opts}
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                walk(sub, (*path, name))

    walk(cli, ())
    return out


COMMANDS = _commands()
ALL_FLAGS = set().union(*COMMANDS.values())
GROUPS = {path[:-1] for path in COMMANDS if path}   # command paths that take a subcommand
TOP_COMMANDS = {path[0] for path in COMMANDS if path}
# "cachekeeper <a top-level command>", quoted or not: how a text names a command.
COMMAND_NAMED = re.compile(r"\bcachekeeper ([a-z][a-z-]*)")


def _unknown_flags(text: str) -> list[str]:
    """Flags in `text` the CLI lacks: inside a `cachekeeper CMD ...` span, flags of CMD; elsewhere, of any command."""
    bad: list[str] = []
    for span in re.findall(r"`([^`]*)`", text):
        words = span.split()
        if not words or words[0] != "cachekeeper":
            continue
        path: tuple[str, ...] = ()
        for word in words[1:]:
            if (*path, word) not in COMMANDS:
                break
            path = (*path, word)
        rest = words[1 + len(path):]
        if not path or (path in GROUPS and rest and not rest[0].startswith("-")):
            bad.append(f"`{span}`: no such command")
            continue
        bad += [f"`{span}`: {flag}" for flag in FLAG.findall(span) if flag not in COMMANDS[path]]
    outside = re.sub(r"`[^`]*`", "", text)
    return bad + [flag for flag in FLAG.findall(outside) if flag not in ALL_FLAGS]


def _raise_site_texts(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every string literal passed to an error class's constructor in `path`."""
    names = {c.__name__ for c in ERROR_CLASSES} | {"CachekeeperError"}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name not in names:
            continue
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            parts = [c.value for c in ast.walk(arg) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
            if parts:
                yield node.lineno, "".join(parts)


# --- the table -------------------------------------------------------------------------------------

def test_the_scan_sees_every_error_class_and_the_click_tree() -> None:
    assert {errors.LockBusy, errors.StoreWriteDenied, errors.QueuePayloadError} <= set(ERROR_CLASSES)
    assert "--deadline" in COMMANDS[("hydrate",)] and "--lock-timeout" in COMMANDS[("capture",)]
    assert "--lock-timeout" not in COMMANDS[("hydrate",)]
    assert ("db", "upgrade") in COMMANDS and "--help" in COMMANDS[("db", "upgrade")]


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_every_error_class_has_a_hint_of_its_own_or_inherited(cls: type[errors.CachekeeperError]) -> None:
    row = row_for(cls)
    assert row is not None and row.text.strip(), f"{cls.__name__} has no row in cli/hints.py, nor a base with one"
    assert "\n" not in row.text + row.subject


def test_the_table_names_only_error_classes() -> None:
    assert all(issubclass(cls, errors.CachekeeperError) for cls in HINTS)


@pytest.mark.parametrize("cls", list(HINTS), ids=lambda c: c.__name__)
def test_hints_name_only_flags_and_commands_the_cli_has(cls: type[errors.CachekeeperError]) -> None:
    row = HINTS[cls]
    rendered = row.render(dict.fromkeys(FIELDS, "X"))
    assert _unknown_flags(row.text) == [] and _unknown_flags(rendered) == []


@pytest.mark.parametrize("cls", list(HINTS), ids=lambda c: c.__name__)
def test_hint_templates_name_only_error_fields(cls: type[errors.CachekeeperError]) -> None:
    names = {name for _, name, _, _ in string.Formatter().parse(HINTS[cls].subject) if name}
    assert names <= FIELDS
    assert not {name for _, name, _, _ in string.Formatter().parse(HINTS[cls].text) if name}, "text takes no fields"


def test_no_hint_names_the_lock_timeout_flag_for_hydrate() -> None:
    # hydrate has no --lock-timeout: it waits for the lock as long as its --deadline allows.
    hint = hint_for(errors.LockBusy("/d/.cachekeeper/lock is locked by another process", path="/d/.cachekeeper/lock"))
    assert "/d/.cachekeeper/lock" in hint and "--deadline" in hint
    assert not re.search(r"hydrate[^;(]*--lock-timeout", hint)


# --- hint_for --------------------------------------------------------------------------------------

def test_a_raise_site_hint_wins_over_the_table() -> None:
    assert hint_for(errors.StoreNotFound("s3:// URL names no bucket", "use s3://bucket/prefix")) == \
        "use s3://bucket/prefix"


def test_a_hint_names_the_subject_when_the_error_carries_it() -> None:
    with_url = errors.CatalogNotMigrated("catalog x is at revision none", url="postgresql://ck:***@db/ck")
    assert hint_for(with_url) == "run `cachekeeper db upgrade` against postgresql://ck:***@db/ck"
    assert hint_for(errors.CatalogNotMigrated("catalog x is at revision none")) == \
        "run `cachekeeper db upgrade` against this catalog"


def test_a_class_without_a_row_inherits_its_nearest_base_row() -> None:
    assert errors.StoreRetryable in HINTS and errors.StoreWriteDenied in HINTS  # rows of their own
    assert row_for(errors.QueuePayloadError) is HINTS[errors.QueuePayloadError]

    class Unlisted(errors.StoreAuthError):
        pass

    assert hint_for(Unlisted("denied")) == HINTS[errors.StoreAuthError].text


def test_errors_carry_their_subject_as_fields() -> None:
    exc = errors.ObjectNotFound("s3://b/p/k not found", key="k", url="s3://b/p")
    assert (exc.key, exc.url, exc.path, exc.fingerprint) == ("k", "s3://b/p", None, None)
    assert exc.fields == {"key": "k", "url": "s3://b/p"}
    assert exc.hint == "" and str(exc) == exc.message == "s3://b/p/k not found"


# --- library text ----------------------------------------------------------------------------------

def test_raise_sites_name_only_flags_the_cli_has() -> None:
    # The CLI's own modules included: an error they raise may name a flag, but only a real one.
    bad = [f"{p.relative_to(ROOT)}:{line}: {flag}" for p in sorted(PACKAGE.rglob("*.py"))
           for line, text in _raise_site_texts(p) for flag in _unknown_flags(text)]
    assert bad == []


def test_the_scan_finds_raise_sites_with_flags() -> None:
    # The library scan above must be able to fail: it sees a flag a known raise site names.
    assert any(FLAG.search(t) for p in sorted((PACKAGE / "cli").glob("*.py")) for _, t in _raise_site_texts(p))
    assert _unknown_flags("pass --no-such-flag") == ["--no-such-flag"]
    assert _unknown_flags("run `cachekeeper hydrate --lock-timeout 5`") == [
        "`cachekeeper hydrate --lock-timeout 5`: --lock-timeout"]
    assert _unknown_flags("run `cachekeeper nosuch`") == ["`cachekeeper nosuch`: no such command"]
    assert _unknown_flags("run `cachekeeper db nosuch`") == ["`cachekeeper db nosuch`: no such command"]
    assert _unknown_flags("run `cachekeeper db upgrade --help` or `cachekeeper prebuild CONFIG`") == []


LIBRARY = sorted({p.relative_to(PACKAGE).parts[0] for p in PACKAGE.rglob("*.py")} - {"cli", "__pycache__"})


@pytest.mark.parametrize("area", LIBRARY)
def test_library_errors_name_no_cli_flag_at_all(area: str) -> None:
    # Only cli/ knows the flags: a library error names its subject, and the CLI's hint table the next step.
    paths = [PACKAGE / area] if area.endswith(".py") else sorted((PACKAGE / area).rglob("*.py"))
    flagged = [f"{p.relative_to(ROOT)}:{line}: {text}" for p in paths for line, text in _raise_site_texts(p)
               if FLAG.search(text)]
    assert flagged == []


# --- exit codes: docs/cli.md's promise -------------------------------------------------------------

DOCUMENTED: dict[type[errors.CachekeeperError], str] = {
    errors.UsageError: "usage/config", errors.ConfigError: "usage/config",
    errors.StoreError: "store",
    errors.UnsafePath: "integrity/manifest", errors.IntegrityError: "integrity/manifest",
    errors.ManifestError: "integrity/manifest",
    errors.CatalogError: "catalog",
    errors.BackendUnavailable: "backend/toolchain", errors.ToolchainMismatch: "backend/toolchain",
    errors.BuildFailed: "build", errors.NothingToHydrate: "nothing to hydrate", errors.DestinationError: "destination",
    errors.LockBusy: "lock busy", errors.HydrateIncomplete: "hydrate incomplete", errors.CaptureError: "capture",
    errors.BuildsInProgress: "prebuild", errors.AddressUnavailable: "address in use",
    errors.CompileRefused: "would compile", errors.Terminated: "terminated", errors.Interrupted: "interrupted",
}


def _documented_exit_codes() -> dict[int, str]:
    """code -> meaning, from the table under docs/cli.md's "## Exit codes" heading (up to the next heading)."""
    text = (ROOT / "docs" / "cli.md").read_text()
    start = text.index("\n## Exit codes\n")
    section = text[start:text.find("\n## ", start + 1)]
    return {int(code): label for code, label in re.findall(r"^\| (\d+) \| ([^|]+?) \|", section, re.M)}


def test_docs_cli_lists_each_exit_code_once() -> None:
    rows = re.findall(r"^\| (\d+) \|", (ROOT / "docs" / "cli.md").read_text(), re.M)
    assert sorted(map(int, rows)) == sorted(_documented_exit_codes()) == [*range(2, 16), 130, 143]


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_exit_codes_are_the_documented_ones(cls: type[errors.CachekeeperError]) -> None:
    documented = next(DOCUMENTED[k] for k in cls.__mro__ if k in DOCUMENTED)
    assert _documented_exit_codes()[cls.exit_code] == documented


# --- the handler -----------------------------------------------------------------------------------

def test_the_cli_prints_the_message_and_the_table_hint_and_exits_with_the_class_code() -> None:
    @click.group(cls=_Group)
    def group() -> None:
        pass

    @group.command()
    def locked() -> None:
        raise errors.LockBusy("/d/lock is locked by another process", path="/d/lock")

    result = CliRunner().invoke(group, ["locked"])
    assert result.exit_code == 10
    assert result.output.splitlines() == ["error: /d/lock is locked by another process",
                                          f"hint: {HINTS[errors.LockBusy].subject.format(path='/d/lock')}"]


def _named_commands(text: str) -> list[str]:
    return [name for name in COMMAND_NAMED.findall(text) if name in TOP_COMMANDS]


@pytest.mark.parametrize("area", LIBRARY)
def test_library_errors_name_no_cli_command(area: str) -> None:
    # Next steps that name a command are rows of cli/hints.py, keyed by the error's class (with its fields).
    paths = [PACKAGE / area] if area.endswith(".py") else sorted((PACKAGE / area).rglob("*.py"))
    named = [f"{p.relative_to(ROOT)}:{line}: {text}" for p in paths for line, text in _raise_site_texts(p)
             if _named_commands(text)]
    assert named == []


def test_the_command_scan_can_fail() -> None:
    assert _named_commands("create one with `cachekeeper lock`") == ["lock"]
    assert _named_commands("run cachekeeper verify, then prebuild") == ["verify"]
    assert _named_commands("this cachekeeper reads version 1; files cachekeeper did not place") == []
    # The table does name commands, so the same scan sees them there.
    assert any(_named_commands(row.text) for row in HINTS.values())


@pytest.mark.parametrize(("exc", "hint"), [
    (errors.LockfileError("lockfile /l.json does not exist", path="/l.json"),
     "create /l.json with `cachekeeper lock` (again, if it is from another release)"),
    (errors.LockfileMismatch("/l.json pins toolchain a; this host is b", path="/l.json", fingerprint="a"),
     "regenerate /l.json on a host like this one (`cachekeeper lock`)"),
    (errors.SigningKeyError("/k.pem is not an ed25519 private key", path="/k.pem"),
     "create a signing key at /k.pem with `cachekeeper keygen`"),
    (errors.BlobsMissing("s3://b lacks blobs of 1 manifests (m)", url="s3://b"),
     "run `cachekeeper verify`, then prebuild the affected entries again"),
], ids=lambda v: type(v).__name__ if isinstance(v, errors.CachekeeperError) else "")
def test_next_steps_moved_out_of_the_library_render_from_the_error_fields(
        exc: errors.CachekeeperError, hint: str) -> None:
    assert exc.hint == "" and hint_for(exc) == hint
