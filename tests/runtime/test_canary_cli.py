"""`cachekeeper canary` through the real CLI on the fake backend (tests/fakes.py, no torch in the test): its bad
input (one `error:`, its `hint:`, exit 2), and a replay that writes artifacts: exit 15 naming the shape, the
hydrated dir untouched (the replay ran on a copy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_env import Env, one_error_line
from tests.fakes import served
from tests.simulated.harness import files_under


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


@pytest.mark.parametrize(("flag", "value", "error"), [
    ("--shape", "96x63", "error: --shape 96x63: width 63 is not a multiple of 8 (diffusers latents need it)"),
    ("--shape", "0x64", "error: --shape 0x64: height must be positive, got 0"),
    ("--shape", "99999999x64", "error: --shape 99999999x64: height 99999999 is past the bound of 65536"),
    ("--shape", "big", "error: --shape must be HxW or HxWxB (e.g. 96x64x1), got 'big'"),
    ("--timeout", "0", None), ("--timeout", "-1", None), ("--timeout", "nan", None), ("--timeout", "inf", None),
    ("--timeout", "1e30", None),
])
def test_bad_input_is_one_error_line_and_exit_2(env: Env, flag: str, value: str, error: str | None) -> None:
    proc = env.run("canary", "--config", str(env.config), "--dest", str(env.tmp / "dest"), flag, value, ok=False)
    assert proc.returncode == 2
    line = one_error_line(proc)
    assert line == error if error else line.startswith("error: --timeout: "), line
    assert "hint: " in proc.stderr


def test_a_replay_that_writes_artifacts_would_compile_and_the_hydrated_dir_keeps_its_names(env: Env) -> None:
    env.vars["FAKE_GRAPH_FILES"] = "1"   # one graph file per shape, as a static-shape compiler writes
    env.run("prebuild", str(env.config), "--no-catalog")
    env.run("hydrate", "--config", str(env.config), "--dest", str(env.tmp / "dest"))
    before = files_under(served(env.tmp / "dest"))
    # The fake compiler writes its files in place whatever is there: every replay "compiles", and says which
    # hydrated files it rewrote through the canary's links.
    proc = env.run("canary", "--config", str(env.config), "--dest", str(env.tmp / "dest"), "--shape", "96x64",
                   "--json", ok=False)
    assert proc.returncode == 15
    entries = json.loads(proc.stdout)["toolchains"][0]["entries"]
    assert [(e["shape"], e["ok"], e["compiled"] + e["wrote"] > 0) for e in entries] == [
        ("64x64x1", False, True), ("128x64x1", False, True), ("96x64x1", False, True)]
    assert [e["reason"] for e in entries] == ["fingerprint", "fingerprint", "no_artifact"]
    assert "no entry of" in entries[2]["detail"] and "add 96x64x1 to model tiny's shapes" in entries[2]["detail"]
    assert all("hydrated files in place" in e["detail"] for e in entries)
    assert one_error_line(proc).startswith("error: canary: 3 of 3 entries would compile on this host: tiny 64x64x1 "
                                           "on fake (entry ")
    assert files_under(served(env.tmp / "dest")) == before, "the 96x64 graph went to the copy, not the dest"


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), 1e30])
def test_the_api_checks_the_timeout_where_it_enters(tmp_path: Path, timeout: float) -> None:
    from cachekeeper.admin.canary import run_canary
    from cachekeeper.config import parse_config
    from cachekeeper.errors import UsageError

    config = parse_config("version: 1\ndefaults: {backends: [inductor], shapes: ['64x64']}\n"
                          "models:\n  - name: m\n    path: /m\n")
    with pytest.raises(UsageError) as caught:
        run_canary(config, tmp_path, timeout=timeout)
    assert caught.value.message.startswith("run_canary(timeout=...): ")
