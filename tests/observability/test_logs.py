"""`--log-format json` (or CACHEKEEPER_LOG_FORMAT=json): every error, hint, warning, progress and summary
line on stderr is one JSON object, carrying the fields the human line and the `--json` summary carry. The
human format is the default and unchanged; an unknown format is one error line and exit 2."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .conftest import Ck


def events(stderr: str) -> list[dict[str, Any]]:
    """Every stderr line parsed as JSON: a line that is not one fails the test."""
    return [json.loads(line) for line in stderr.splitlines() if line.strip()]


def test_an_error_is_one_object_with_its_hint_exit_code_and_subject_fields(ck: Ck) -> None:
    human = ck.run("hydrate", "--lockfile", str(ck.tmp / "nope.lock"), ok=False)
    proc = ck.run("--log-format", "json", "hydrate", "--lockfile", str(ck.tmp / "nope.lock"), ok=False)
    assert proc.returncode == human.returncode == 2
    [event] = events(proc.stderr)
    lines = human.stderr.splitlines()
    assert lines == [f"error: {event['message']}", f"hint: {event['hint']}"], "the same words in both formats"
    assert event["event"] == "error" and event["level"] == "error" and event["exit_code"] == 2
    assert event["error"] == "LockfileError" and event["path"] == str(ck.tmp / "nope.lock")


def test_the_env_var_chooses_the_format_and_click_usage_errors_follow_it(ck: Ck) -> None:
    proc = ck.run("hydrate", "--threads", "0", ok=False, CACHEKEEPER_LOG_FORMAT="json")
    [event] = events(proc.stderr)
    assert proc.returncode == 2 and event["event"] == "error" and "--threads" in event["message"]
    assert event["hint"] == "run `cachekeeper hydrate --help`"


def test_hydrate_warnings_and_summary_are_objects_with_the_json_summarys_fields(built: Ck) -> None:
    args = ("hydrate", "--config", str(built.config), "--dest", str(built.tmp / "d"), "--metrics-file",
            str(built.tmp / "no" / "dir" / "h.prom"))
    human = built.run(*args)
    plain_summary = json.loads(human.stderr.splitlines()[-1])   # not a tty: the JSON summary line
    proc = built.run("--log-format", "json", *args, "--model", "tiny")
    warning, summary = events(proc.stderr)
    assert warning["event"] == "warning" and warning["level"] == "warning"
    assert human.stderr.splitlines()[0] == f"warning: {warning['message']}"
    assert summary["event"] == "summary" and summary["level"] == "info" and summary["command"] == "hydrate"
    assert set(plain_summary) <= set(summary) and summary["hydrate"] == "noop"


def test_prebuild_lines_are_progress_events_and_its_last_a_summary(ck: Ck) -> None:
    proc = ck.run("--log-format", "json", "prebuild", str(ck.config))
    evs = events(proc.stderr)
    assert [e["event"] for e in evs] == ["progress", "progress", "summary"]
    assert all(e["level"] == "info" for e in evs)
    assert sum("built" in e["message"] for e in evs) == 3 and evs[-1]["message"].startswith("prebuild: 2 built")
    assert evs[-1]["command"] == "prebuild" and evs[-1]["counts"] == {"built": 2}


def test_the_human_format_is_the_default(ck: Ck) -> None:
    proc = ck.run("hydrate", "--lockfile", str(ck.tmp / "nope.lock"), ok=False)
    assert proc.stderr.startswith("error: lockfile ") and "\nhint: " in proc.stderr


@pytest.mark.parametrize("how", ["flag", "env"])
def test_an_unknown_log_format_is_one_error_line_and_exit_2(ck: Ck, how: str) -> None:
    proc = (ck.run("--log-format", "yaml", "validate", str(ck.config), ok=False) if how == "flag"
            else ck.run("validate", str(ck.config), ok=False, CACHEKEEPER_LOG_FORMAT="yaml"))
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr
    assert ("--log-format" if how == "flag" else "env CACHEKEEPER_LOG_FORMAT") in errors[0]
    assert "'yaml' is not one of 'human', 'json'" in errors[0] and "valid" not in proc.stderr.replace(errors[0], "")
