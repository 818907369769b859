"""Every option of every command, and every env var they read, driven with generated values through the
real click tree: the answer is success or one `error:` line (exit 2 for a bad value), never a traceback,
never a hang.

The tree is walked, not listed, so an option another branch adds later is covered without touching this
file. Commands run in-process (CliRunner; `os.nice` stubbed, or capture would renice pytest) against an
empty home in a temp dir. URL options (`--store`, `--catalog`, `--host`) keep their defaults here, since a
generated URL would reach for the network (their parsing has its own tests), and `dashboard`, which serves
until stopped, is parsed, not run.
"""

from __future__ import annotations

import math
import os
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from unittest import mock

import click
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cachekeeper.cli import _register, cli
from cachekeeper.cli.options import Number
from tests.fakes import ENABLE

SECONDS = 5                          # a hang is anything longer than this
NETWORK = {"--store", "--catalog", "--host"}
SERVES = {"dashboard"}               # runs until stopped: parsed only
# What a required argument or option gets: something that exists nowhere, so the command fails on it
# (one error line) after its options were checked.
REQUIRED = {"CONFIG": "missing.yaml", "KEY": "0123abcd", "--config": "missing.yaml", "--output": "out.file",
            "-o": "out.file", "--dest": "never-hydrated"}
EXTRA_ENV = ("CACHEKEEPER_STALL_TIMEOUT",)   # read by the store reader, not declared on an option


def commands(group: click.Group = cli, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    _register()
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from commands(command, (*path, name))
        else:
            yield (*path, name), command


def required_argv(command: click.Command) -> list[str]:
    argv: list[str] = []
    for param in command.params:
        if isinstance(param, click.Argument) and param.required:
            argv.append(REQUIRED.get((param.metavar or param.name or "").upper(), "x"))
        elif isinstance(param, click.Option) and param.required:
            flag = max(param.opts, key=len)
            argv += [flag, REQUIRED.get(flag, "x")]
    return argv


def options() -> list[tuple[tuple[str, ...], click.Command, click.Option]]:
    return [(path, command, p) for path, command in commands() for p in command.params
            if isinstance(p, click.Option) and not p.is_flag and not p.count and p.name != "help"
            and not NETWORK & set(p.opts)]


def env_vars() -> list[tuple[tuple[str, ...], click.Command, str]]:
    found = [(path, command, p.envvar) for path, command, p in options() if isinstance(p.envvar, str)]
    flags = [(path, command, p.envvar) for path, command in commands() for p in command.params
             if isinstance(p, click.Option) and p.is_flag and isinstance(p.envvar, str)]
    hydrate = dict(commands())[("hydrate",)]
    return found + flags + [(("hydrate",), hydrate, var) for var in EXTRA_ENV]


def numbers() -> st.SearchStrategy[str]:
    """What a typo, a unit mix-up or a hostile template puts where a number goes."""
    specials = st.sampled_from(["0", "-0", "-1", "nan", "inf", "-inf", "1e9", "1e12", "1e20", "1e308", "1e309",
                                "0.0001", "abc", "", " ", "1,5", "0x10", "10s", "99999999999999999999"])
    finite = st.floats(allow_nan=False, allow_infinity=False).map(repr)
    return st.one_of(specials, st.integers(-10**12, 10**12).map(str), finite)


def values(option: click.Option) -> st.SearchStrategy[str]:
    if isinstance(option.type, Number | click.types.IntParamType | click.types.FloatParamType):
        return numbers()
    if isinstance(option.type, click.Choice):
        return st.one_of(st.sampled_from([str(c) for c in option.type.choices]), st.just("no-such-choice"))
    text = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=12)
    return st.one_of(numbers(), text)


class Hang(Exception):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise Hang(f"no answer within {SECONDS}s")


def run(tmp: Path, path: tuple[str, ...], command: click.Command, argv: list[str], env: dict[str, str]) -> None:
    full = [*path, *required_argv(command), *argv]
    if path[-1] in SERVES:
        try:
            command.make_context(path[-1], [*required_argv(command), *argv])
        except click.UsageError as exc:
            assert exc.exit_code == 2
        return
    base = {**ENABLE, "CACHEKEEPER_HOME": str(tmp / "home"), "CACHEKEEPER_STORE": None, "CACHEKEEPER_CATALOG": None,
            "FAKE_SHARED_DIR": str(tmp / "shared"), "COLUMNS": "200"}
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(SECONDS)
    cwd = Path.cwd()
    try:
        # In-process: `capture --nice N` would renice the test process itself (and every later example).
        with mock.patch("os.nice"), tempfile.TemporaryDirectory(dir=tmp) as work:
            os.chdir(work)
            result = CliRunner().invoke(cli, full, env={**base, **env}, catch_exceptions=True)
    finally:
        os.chdir(cwd)
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    shown = f"cachekeeper {' '.join(full)} {env}:\n{result.stderr}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{shown}\nraised {result.exception!r}") from result.exception
    assert "Traceback" not in result.stderr, shown
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    if result.exit_code == 0:
        assert not errors, shown
    else:
        assert len(errors) == 1 and not result.stderr.startswith("Error"), shown


OPTIONS = options()
ENV_VARS = env_vars()


def test_the_walk_finds_the_numeric_options_and_env_vars() -> None:
    numeric = {(" ".join(path), max(p.opts, key=len)) for path, _, p in OPTIONS if isinstance(p.type, Number)}
    assert {("hydrate", "--threads"), ("hydrate", "--deadline"), ("prebuild", "--workers"), ("prebuild", "--lease"),
            ("capture", "--settle"), ("gc", "--min-age"), ("diff", "--workers")} <= numeric
    assert {"CACHEKEEPER_DEADLINE", "CACHEKEEPER_STALL_TIMEOUT", "CACHEKEEPER_BEST_EFFORT"} <= {v for *_, v in ENV_VARS}
    untyped = [(path, p.name) for path, _, p in OPTIONS
               if isinstance(p.type, click.types.IntParamType | click.types.FloatParamType)]
    assert not untyped, f"numeric options without a bound from cachekeeper.bounds: {untyped}"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=st.data())
def test_any_value_of_any_option_is_success_or_one_error_line(data: st.DataObject, tmp_path: Path) -> None:
    path, command, option = data.draw(st.sampled_from(OPTIONS), label="option")
    value = data.draw(values(option), label="value")
    run(tmp_path, path, command, [max(option.opts, key=len), value], {})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=st.data())
def test_any_value_of_any_env_var_is_success_or_one_error_line(data: st.DataObject, tmp_path: Path) -> None:
    path, command, var = data.draw(st.sampled_from(ENV_VARS), label="env var")
    value = data.draw(numbers(), label="value")
    run(tmp_path, path, command, [], {var: value})


@pytest.mark.parametrize(("argv", "env", "names"), [
    (["hydrate", "--threads", "0"], {}, "--threads"),
    (["hydrate", "--deadline", "nan"], {}, "--deadline"),
    (["hydrate"], {"CACHEKEEPER_DEADLINE": "abc"}, "env CACHEKEEPER_DEADLINE"),
    (["hydrate", "--backend", "fake"], {"CACHEKEEPER_STALL_TIMEOUT": "abc"}, "env CACHEKEEPER_STALL_TIMEOUT"),
    (["gc", "--min-age", "-1"], {}, "--min-age"),
    (["capture", "--dest", "d", "--settle", "-1"], {}, "--settle"),
    (["prebuild", "x.yaml", "--lease", "inf"], {}, "--lease"),
    (["prebuild", "x.yaml", "--workers", "1000000000"], {}, "--workers"),
    (["diff", "--workers", "1000000000000"], {}, "--workers"),
    (["hydrate", "--bogus"], {}, "--bogus"),
])
def test_a_bad_value_is_one_error_line_naming_its_source_and_exit_2(
        tmp_path: Path, argv: list[str], env: dict[str, str], names: str) -> None:
    _register()
    result = CliRunner().invoke(cli, argv, env={**ENABLE, "CACHEKEEPER_HOME": str(tmp_path), **env})
    lines = result.stderr.splitlines()
    assert result.exit_code == 2 and len(lines) == 2, result.stderr
    assert lines[0].startswith("error: ") and names in lines[0] and lines[1].startswith("hint: ")


def test_the_python_api_checks_its_numbers_with_the_same_bounds(tmp_path: Path) -> None:
    import cachekeeper
    from cachekeeper.errors import UsageError

    os.environ.update(ENABLE)
    for kw in ({"threads": 0}, {"threads": 10**9}, {"deadline": math.nan}, {"deadline": math.inf}):
        with pytest.raises(UsageError, match=r"hydrate\((threads|deadline)=\.\.\.\)"):
            cachekeeper.hydrate(backend="fake", dest=tmp_path / "d", store=f"file://{tmp_path}", **kw)
    with pytest.raises(UsageError, match=r"capture\(settle=\.\.\.\)"):
        cachekeeper.capture(tmp_path, backend="fake", settle=-1)
