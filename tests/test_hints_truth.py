"""Hints tell the truth: a trust problem is named as one (with the key it needs), not as corrupt bytes,
and a plugin that is not a Backend is one line naming the plugin."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cli_env import Env, one_error_line


@pytest.fixture()
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


def hint_line(stderr: str) -> str:
    [hint] = [line for line in stderr.splitlines() if line.startswith("hint: ")]
    return hint


def test_a_manifest_signed_by_an_untrusted_key_names_that_key(env: Env) -> None:
    signer = env.tmp / "publisher.key"
    env.run("keygen", "-o", str(signer))
    env.run("prebuild", str(env.config), "--sign-key", str(signer))
    trusted = env.run("keygen", "-o", str(env.tmp / "mine.key")).stdout.strip()
    proc = env.run("hydrate", "--config", str(env.config), "--dest", str(env.tmp / "d"), "--trusted-key", trusted,
                   ok=False)
    err, hint = one_error_line(proc), hint_line(proc.stderr)
    found = re.search(r"signed by key (\S+), which is not trusted", err)
    assert proc.returncode == 4 and found, err
    assert f"trust key {found[1]} " in hint and "--trusted-key" in hint and "digest" not in hint


def test_an_unsigned_manifest_with_trusted_keys_says_how_to_sign(env: Env) -> None:
    env.run("prebuild", str(env.config))
    trusted = env.run("keygen", "-o", str(env.tmp / "mine.key")).stdout.strip()
    proc = env.run("hydrate", "--config", str(env.config), "--dest", str(env.tmp / "d"), "--trusted-key", trusted,
                   ok=False)
    assert proc.returncode == 4 and "is not signed" in one_error_line(proc)
    hint = hint_line(proc.stderr)
    assert "--sign-key" in hint and "digest" not in hint and "rebuild the entry" not in hint


@pytest.mark.parametrize(("target", "says"), [("json:JSONDecoder", "is not a cachekeeper.backends.base.Backend"),
                                              ("no_such_module:Backend", "cannot be loaded")])
def test_a_plugin_that_is_not_a_backend_is_one_line_naming_it(env: Env, target: str, says: str) -> None:
    proc = env.run("hydrate", "--backend", "mine", "--dest", str(env.tmp / "d"), ok=False,
                   CACHEKEEPER_BACKENDS=f"mine={target}")
    err = one_error_line(proc)
    assert proc.returncode == 2 and "'mine'" in err and target in err and says in err
