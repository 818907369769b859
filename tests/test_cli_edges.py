"""The edges of the CLI, through the real `cachekeeper` command (issue 28, points 7 and 8): messages that
blame the right thing (the flag whose path failed, the store's missing permission, the lockfile), no secret
echoed, and numbers and flags that cannot slip through (one byte-size parser, env vars checked at entry,
modifier flags without the flag they modify)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli_env import Env, one_error_line, run_cli


@pytest.fixture()
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


@pytest.fixture()
def built(env: Env) -> Env:
    env.run("prebuild", str(env.config), "--store", env.store_url)
    return env


def _store(env: Env) -> str:
    return f"file://{env.tmp / 'store'}"


Env.store_url = property(_store)  # type: ignore[attr-defined]


def hint_line(proc: subprocess.CompletedProcess[str]) -> str:
    hints = [line for line in proc.stderr.splitlines() if line.startswith("hint: ")]
    assert len(hints) == 1, proc.stderr
    return hints[0]


def readonly(env: Env, directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`cachekeeper ARGS` with `directory` mounted read-only (a user+mount namespace: root ignores mode bits,
    so this is how a test run as root meets a directory it may not write)."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode:
        pytest.skip("no unprivileged user+mount namespaces here (unshare -rm)")
    import sys

    directory.mkdir(parents=True, exist_ok=True)
    script = (f'mount --bind "{directory}" "{directory}" && mount -o remount,bind,ro "{directory}" && '
              f'exec "{sys.executable}" -m cachekeeper "$@"')
    proc = subprocess.run(["unshare", "-rm", "sh", "-c", script, "sh", *args], capture_output=True, text=True,
                          env=env.vars, cwd=env.tmp, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


# --- 7: a store that refuses writes is exit 3 naming the permission, in every command ------------------


def test_a_read_only_file_store_in_prebuild_is_exit_3_naming_the_permission(env: Env) -> None:
    store = env.tmp / "store"
    proc = readonly(env, store, "prebuild", str(env.config), "--store", env.store_url, "--no-catalog")
    line = one_error_line(proc)
    # before: exit 9, "cannot create directory …" and "choose a writable destination with --dest"
    assert proc.returncode == 3 and "write refused" in line and "write permission" in line, proc.stderr
    assert "--dest" not in proc.stderr and "write access to the store" in hint_line(proc)


def test_a_store_dir_that_cannot_be_created_is_exit_3_naming_the_permission(env: Env) -> None:
    parent = env.tmp / "ro"
    proc = readonly(env, parent, "prebuild", str(env.config), "--store", f"file://{parent}/store", "--no-catalog")
    assert proc.returncode == 3 and "write refused" in one_error_line(proc), proc.stderr


def test_gc_on_a_read_only_store_is_exit_3_naming_the_permission(built: Env) -> None:
    orphan = built.tmp / "store" / "blobs" / "sha256" / "00" / ("00" * 32)
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"unreferenced")
    proc = readonly(built, built.tmp / "store", "gc", "--store", built.store_url, "--min-age", "0", "--run")
    assert proc.returncode == 3 and "write refused" in one_error_line(proc), proc.stderr   # before: a traceback


# --- 7: an exit-9 hint names the flag that gave the path ---------------------------------------------


@pytest.mark.parametrize(("args", "flag"), [
    (["lock", "--config", "{config}", "--store", "{store}", "-o", "{ro}/x.lock"], "-o/--output"),
    (["env", "--config", "{config}", "--dest", "{tmp}/d", "-o", "{ro}/env"], "-o/--output"),
    (["keygen", "-o", "{ro}/k.pem"], "-o/--output"),
    (["hydrate", "--config", "{config}", "--store", "{store}", "--dest", "{tmp}/d", "--env-file", "{ro}/env"],
     "--env-file"),
    (["hydrate", "--config", "{config}", "--store", "{store}", "--dest", "{ro}/d"], "--dest"),
])
def test_an_unwritable_path_is_exit_9_and_the_hint_names_its_flag(built: Env, args: list[str], flag: str) -> None:
    ro = built.tmp / "ro"
    filled = [a.format(config=built.config, store=built.store_url, tmp=built.tmp, ro=ro) for a in args]
    proc = readonly(built, ro, *filled)
    one_error_line(proc)
    # before: every one of them said "choose a writable destination with --dest"
    assert proc.returncode == 9 and f"choose a writable path for {flag}" in hint_line(proc), proc.stderr


# --- 7: lockfiles ---------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    '{"version": 1, "backend": "fake", "fingerprint_id": "f", "manifests": []}',   # pins nothing
    "[1, 2]",                                                                      # not an object
    '{"version": 1, "backend": "fake", "fingerprint_id": "f", "manifests": [{"name": 1}]}',
    '{"version": 1, "backend": "fake", "fingerprint_id": "f", "manifests": [{"name": "a", "digest": "x"}]}',
    "{" * 100_000,                                                                 # deep nesting
    "",
])
def test_a_bad_lockfile_is_one_line_naming_the_lockfile(built: Env, text: str) -> None:
    lock = built.tmp / "bad.lock"
    lock.write_text(text)
    proc = built.run("hydrate", "--lockfile", str(lock), "--store", built.store_url, "--dest",
                     str(built.tmp / "d"), ok=False)
    line = one_error_line(proc)
    assert proc.returncode == 2 and f"lockfile {lock}" in line, proc.stderr
    assert "has no entries" not in proc.stderr   # before, for one that pins nothing: "store has no entries"


def test_lock_records_the_store_and_hydrate_reads_the_pins_from_it(built: Env) -> None:
    lock = built.tmp / "ck.lock"
    built.run("lock", "--config", str(built.config), "--store", built.store_url, "-o", str(lock))
    assert json.loads(lock.read_text())["store"] == built.store_url
    # No --store: before, the default store (empty) answered "has no entries"; now the lockfile's store.
    proc = built.run("hydrate", "--lockfile", str(lock), "--dest", str(built.tmp / "d"), "--json")
    assert json.loads(proc.stdout)["files_fetched"] > 0


def test_a_lockfile_whose_pins_the_store_lacks_names_the_lockfile(built: Env) -> None:
    lock = built.tmp / "ck.lock"
    built.run("lock", "--config", str(built.config), "--store", built.store_url, "-o", str(lock))
    empty = built.tmp / "empty-store"
    empty.mkdir()
    proc = built.run("hydrate", "--lockfile", str(lock), "--store", f"file://{empty}", "--dest",
                     str(built.tmp / "d"), ok=False)
    assert proc.returncode == 8 and f"lockfile {lock}" in one_error_line(proc), proc.stderr


# --- 7: no secret is ever echoed ------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--trusted-key", "--capture-key"])
def test_a_private_key_given_as_a_public_key_is_never_echoed(built: Env, flag: str) -> None:
    pem = built.tmp / "k.pem"
    public = built.run("keygen", "-o", str(pem)).stdout.strip()
    secret = pem.read_text()
    extra = ["--trusted-key", public] if flag == "--capture-key" else []
    proc = built.run("hydrate", "--config", str(built.config), "--store", built.store_url, "--dest",
                     str(built.tmp / "d"), *extra, flag, secret, ok=False)
    line = one_error_line(proc)
    assert proc.returncode == 2 and "private key" in line, proc.stderr
    body = [ln for ln in secret.splitlines() if not ln.startswith("-----")]
    assert body and not any(chunk in proc.stderr + proc.stdout for ln in body for chunk in (ln[:12], ln[-12:]))
    assert "BEGIN" not in proc.stderr   # before: `not an ed25519 public key: '-----BEGIN PRIVATE KEY-----\nMC4C…'`


def test_any_text_that_is_not_a_public_key_is_not_echoed(built: Env) -> None:
    token = "hunter2-very-secret-token-value"
    proc = built.run("hydrate", "--config", str(built.config), "--store", built.store_url, "--dest",
                     str(built.tmp / "d"), "--trusted-key", token, ok=False)
    assert proc.returncode == 2 and token[:8] not in proc.stderr, proc.stderr


# --- 8: one byte-size parser; fractions refused ----------------------------------------------------


@pytest.mark.parametrize("value", ["1.5", "0.5G", "1.0", ".5k"])
def test_a_fractional_byte_size_is_refused_by_flag_env_and_config(built: Env, value: str) -> None:
    dest = str(built.tmp / "d")
    by_flag = built.run("hydrate", "--config", str(built.config), "--store", built.store_url, "--dest", dest,
                        "--max-bytes", value, ok=False)
    # before: `--max-bytes 1.5` ran with a 1-byte budget (exit 0)
    assert by_flag.returncode == 2 and "fraction" in one_error_line(by_flag), by_flag.stderr
    by_env = built.run("hydrate", "--config", str(built.config), "--store", built.store_url, "--dest", dest,
                       ok=False, CACHEKEEPER_MAX_BYTES=value)
    assert by_env.returncode == 2 and "CACHEKEEPER_MAX_BYTES" in one_error_line(by_env)
    by_gc = built.run("gc", "--dest", dest, "--max-bytes", value, ok=False)
    assert by_gc.returncode == 2 and "fraction" in one_error_line(by_gc)
    config = built.tmp / "frac.yaml"
    config.write_text(built.config.read_text().replace("version: 1", f"version: 1\nhydrate:\n  max_bytes: {value}"))
    by_config = built.run("validate", str(config), ok=False)
    assert by_config.returncode == 2 and "hydrate.max_bytes" in one_error_line(by_config)


@pytest.mark.parametrize("value", ["50G", "512MiB", "1t", "20000000000"])
def test_a_byte_size_the_flag_takes_the_config_takes_too(built: Env, value: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from cachekeeper.bounds import parse_bytes
    from tests.fakes import ENABLE

    config = built.tmp / "sized.yaml"
    config.write_text(built.config.read_text().replace("version: 1", f"version: 1\nhydrate:\n  max_bytes: {value}"))
    built.run("validate", str(config))   # before: "hydrate.max_bytes must be an integer, got '50G'"
    built.run("hydrate", "--config", str(built.config), "--store", built.store_url, "--dest", str(built.tmp / "d"),
              "--max-bytes", value)
    from cachekeeper.config import load_config

    for k, v in ENABLE.items():
        monkeypatch.setenv(k, v)
    assert load_config(str(config)).hydrate.max_bytes == parse_bytes(value)


# --- 8: every env var is checked at entry, even on a no-op -------------------------------------------


@pytest.mark.parametrize(("var", "value"), [
    ("CACHEKEEPER_PART_MIB", "5000"), ("CACHEKEEPER_PART_MIB", "-1"), ("CACHEKEEPER_STALL_TIMEOUT", "0"),
    ("CACHEKEEPER_S3_ADDRESSING_STYLE", "sideways"),
])
def test_a_bad_env_var_is_refused_at_entry_even_on_a_no_op(built: Env, var: str, value: str) -> None:
    args = ("hydrate", "--config", str(built.config), "--store", built.store_url, "--dest", str(built.tmp / "d"))
    built.run(*args)   # placed: the next run is a no-op (before: CACHEKEEPER_PART_MIB=5000 passed it, exit 0)
    for command in (args, ("validate", str(built.config))):
        proc = built.run(*command, ok=False, **{var: value})
        assert proc.returncode == 2 and var in one_error_line(proc), proc.stderr


# --- 8: a modifier flag without the flag it modifies ----------------------------------------------


@pytest.mark.parametrize(("args", "modifier"), [
    (["hydrate", "--config", "{config}", "--dest", "{tmp}/d", "--env-format", "systemd"], "--env-format"),
    (["hydrate", "--config", "{config}", "--dest", "{tmp}/d", "--node-cache-link", "copy"], "--node-cache-link"),
    (["hydrate", "--config", "{config}", "--dest", "{tmp}/d", "--node-cache-max-bytes", "1G"],
     "--node-cache-max-bytes"),
    (["prebuild", "{config}", "--no-catalog", "--wait"], "--wait"),
    (["prebuild", "{config}", "--no-catalog", "--verify-store"], "--verify-store"),
    (["prebuild", "{config}", "--no-catalog", "--lease", "60"], "--lease"),
    (["prebuild", "{config}", "--no-catalog", "--heartbeat", "2"], "--heartbeat"),
    (["prebuild", "{config}", "--no-catalog", "--worker", "w1"], "--worker"),
    (["prebuild", "{config}", "--no-catalog", "--catalog", "sqlite:///{tmp}/c.db"], "--catalog"),
    (["gc", "--keep-lockfile", "{tmp}/x.lock"], "--keep-lockfile"),
    (["gc", "--max-bytes", "1G"], "--max-bytes"),
    (["gc", "--dest", "{tmp}/d", "--drop", "abcd"], "--drop"),
    (["capture", "--dest", "{tmp}/d", "--sign-key", "{tmp}/k.pem"], "--sign-key"),
    (["stats", "--since", "1d"], "--since"),
    (["hydrate", "--lockfile", "{tmp}/x.lock", "--model", "tiny"], "--model"),
    (["coverage", "{config}", "--store", "file://{tmp}/s"], "--store"),
    (["coverage", "{config}", "--no-catalog", "--catalog", "sqlite:///{tmp}/c.db"], "--catalog"),
    (["coverage", "{config}", "--fingerprint", "abcd", "--device", "cpu"], "--device"),
])
def test_a_modifier_without_the_flag_it_modifies_is_one_line(env: Env, args: list[str], modifier: str) -> None:
    filled = [a.format(config=env.config, tmp=env.tmp) for a in args]
    proc = env.run(*filled, ok=False)
    # before: exit 0 (or whatever the rest of the command did), the modifier silently ignored
    assert proc.returncode == 2 and modifier in one_error_line(proc), proc.stderr


def test_a_private_key_pasted_as_the_sign_key_path_is_never_echoed(env: Env) -> None:
    pem = env.tmp / "k.pem"
    env.run("keygen", "-o", str(pem))
    secret = pem.read_text()
    proc = env.run("prebuild", str(env.config), "--no-catalog", "--sign-key", secret, ok=False)
    one_error_line(proc)
    body = [ln for ln in secret.splitlines() if not ln.startswith("-----")]
    # before: the key's text in the error line, over three lines, and again in the hint
    assert proc.returncode == 2 and not any(ln[:12] in proc.stderr for ln in body) and "BEGIN" not in proc.stderr


@pytest.mark.parametrize("planted", ["a FIFO", "a symlink to /dev/zero", "a 1 MiB file"])
def test_a_sign_key_that_is_no_key_file_is_one_line_not_a_hang(env: Env, planted: str) -> None:
    key = env.tmp / "k.pem"
    if planted == "a FIFO":
        os.mkfifo(key)
    elif planted == "a symlink to /dev/zero":
        key.symlink_to("/dev/zero")
    else:
        key.write_bytes(b"-----BEGIN PRIVATE KEY-----\n" + b"A" * (1 << 20))
    # before: a FIFO blocked the prebuild until its 30 s timeout; /dev/zero read until memory ran out
    proc = run_cli(["prebuild", str(env.config), "--no-catalog", "--sign-key", str(key)], env.vars, env.tmp,
                   ok=False, timeout=30)
    line = one_error_line(proc)
    assert proc.returncode == 2 and "cannot load signing key" in line, proc.stderr
    assert any(ln.startswith("hint: ") for ln in proc.stderr.splitlines())
