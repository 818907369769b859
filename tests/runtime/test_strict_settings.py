"""Strict mode's three doors and their bad input: CACHEKEEPER_STRICT (one `error:` naming the allowed values, exit 2,
at any command; the same UsageError when cachekeeper.runtime is imported), the config's `strict:` key (file:line)
and `cachekeeper.runtime.strict(mode)` (the same error type and words); one precedence: the call over the
variable over the config."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cachekeeper import settings
from cachekeeper.config import parse_config
from cachekeeper.errors import ConfigError, UsageError
from cachekeeper.runtime import hooks, strict_mode
from tests.cli_env import Env, one_error_line

ALLOWED = "is not one of off, report, fail"
HINT = "hint: set CACHEKEEPER_STRICT to off, report or fail, or unset it"


@pytest.mark.parametrize("raw", ["yes", "-1", "nan", "x" * 5000])
def test_a_bad_variable_is_one_error_line_naming_the_allowed_values_and_exit_2(tmp_path: Path, raw: str) -> None:
    env = Env(tmp_path)
    proc = env.run("validate", str(env.config), ok=False, CACHEKEEPER_STRICT=raw)
    assert proc.returncode == 2
    assert one_error_line(proc) == f"error: env CACHEKEEPER_STRICT: {raw!r} {ALLOWED}"
    assert HINT in proc.stderr.splitlines()


@pytest.mark.parametrize("raw", ["yes", "on", "true", "1", "0", "-1", "nan", "inf", "1e309", "fail report", "failx",
                                 "x" * 5000])
def test_the_api_raises_the_same_error_type_with_the_same_words(raw: str) -> None:
    with pytest.raises(UsageError) as from_env:
        settings.STRICT.get({settings.STRICT.name: raw})
    with pytest.raises(UsageError) as from_call:
        strict_mode.strict(raw)
    assert from_env.value.message == f"env CACHEKEEPER_STRICT: {raw!r} {ALLOWED}"
    assert from_call.value.message == f"strict(mode=...): {raw!r} {ALLOWED}"
    assert from_call.value.exit_code == from_env.value.exit_code == 2


@pytest.mark.parametrize(("raw", "mode"), [(" FAIL ", "fail"), ("Report", "report"), ("off", "off"), ("", None),
                                           ("   ", None)])
def test_the_variable_is_read_case_blind_and_blank_is_unset(raw: str, mode: str | None) -> None:
    assert settings.STRICT.get({settings.STRICT.name: raw}) == mode


def test_a_bad_variable_stops_the_import_of_the_runtime_with_that_error() -> None:
    proc = subprocess.run([sys.executable, "-c", "import cachekeeper.runtime"], capture_output=True, text=True,
                          env={"CACHEKEEPER_STRICT": "yes", "PATH": "/usr/bin:/bin"}, timeout=120)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last == f"cachekeeper.errors.UsageError: env CACHEKEEPER_STRICT: 'yes' {ALLOWED}"


CONFIG = "version: 1\n{}\ndefaults: {{backends: [inductor], shapes: ['64x64']}}\nmodels:\n  - name: m\n    path: /m\n"


@pytest.mark.parametrize(("line", "mode"), [("strict: off", "off"), ("strict: fail", "fail"),
                                            ("strict: 'report'", "report"), ("strict: FAIL", "fail"), ("", "off")])
def test_the_config_key_reads_as_written(line: str, mode: str) -> None:
    assert parse_config(CONFIG.format(line)).strict == mode   # a bare `off` is YAML's false: it means off here


@pytest.mark.parametrize(("line", "got"), [("strict: yes", "got yes"), ("strict: on", "got on"), ("strict: 1", "got 1"),
                                           ("strict: -1", "got -1"), ("strict: .nan", "got .nan"),
                                           ("strict: 1e400", "got '1e400'"), ("strict: [fail]", "got a list"),
                                           ("strict:", "got nothing"),
                                           ("strict: fial", "got 'fial'; did you mean 'fail'?")])
def test_a_bad_config_key_is_one_error_at_its_line(line: str, got: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(CONFIG.format(line))
    assert caught.value.message == f"<config>:2: strict must be off, report or fail, {got}"


def test_a_bad_config_key_through_the_cli(tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.config.write_text(env.config.read_text().replace("version: 1\n", "version: 1\nstrict: yes\n"))
    proc = env.run("validate", str(env.config), ok=False)
    assert proc.returncode == 2
    assert one_error_line(proc) == f"error: {env.config}:3: strict must be off, report or fail, got yes"


@pytest.fixture
def mode_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """strict mode's process state, restored after; its hooks are not put into torch here."""
    monkeypatch.setattr(hooks, "ensure", lambda load=False: [])
    saved = dict(strict_mode._state)
    strict_mode._state.update(mode="off", source="default")
    yield
    strict_mode._state.clear()
    strict_mode._state.update(saved)


def test_the_call_wins_over_the_variable_which_wins_over_the_config(mode_state: None,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    config = parse_config(CONFIG.format("strict: report"))
    strict_mode.from_config(config)
    assert strict_mode.mode() == "report"
    monkeypatch.setenv("CACHEKEEPER_STRICT", "fail")
    strict_mode.from_environment()
    assert strict_mode.mode() == "fail"
    strict_mode.from_config(parse_config(CONFIG.format("strict: off")))
    assert strict_mode.mode() == "fail", "the config does not override the variable"
    assert strict_mode.strict("off") == "off" and strict_mode.mode() == "off"
    monkeypatch.setenv("CACHEKEEPER_STRICT", "report")
    strict_mode.from_environment()
    assert strict_mode.mode() == "off", "nor the variable a call"
