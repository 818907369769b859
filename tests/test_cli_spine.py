"""The spine through the real `cachekeeper` command: prebuild -> store -> catalog -> hydrate.

Uses the fake backend (tests/fakes.py: a real subprocess build that writes files, no torch) so every
path of the CLI runs for real in a few seconds; the Inductor loop lives in tests/backends.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli_env import Env, config_text, one_error_line
from tests.fakes import served


@pytest.fixture()
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


@pytest.fixture()
def built(env: Env) -> Env:
    env.run("prebuild", str(env.config))
    return env


def test_prebuild_then_hydrate_reproduces_the_build_in_a_fresh_dir(built: Env) -> None:
    outer = built.tmp / "dest"
    proc = built.run("hydrate", "--config", str(built.config), "--dest", str(outer), "--json")
    report = json.loads(proc.stdout)   # one document: machine output alone on stdout
    # Both entries write the same 15 paths (the first manifest wins each path), plus 1 shared header.
    assert report["files_fetched"] == 15 + 1 and len(report["manifests"]) == 3  # 2 entries + 1 shared
    dest = outer / report["fingerprint_id"]   # the toolchain's own dir under the dest (docs/durability.md)
    assert report["env"] == {"FAKE_CACHE_DIR": str(dest)} and report["dest"] == str(dest)
    printed = built.run("hydrate", "--config", str(built.config), "--dest", str(outer), "--print-env")
    assert printed.stdout == f"export FAKE_CACHE_DIR={dest}\n"
    assert len(list(dest.glob("0?/k*.neff"))) == 12 and (dest / "large.bin").stat().st_size == 5 << 20
    assert not (dest / "busy.lock").exists()  # the backend's include() keeps locks out
    assert (built.shared / "header.gch").read_text().startswith("header 1 ")


def test_a_second_prebuild_builds_nothing(built: Env) -> None:
    proc = built.run("prebuild", str(built.config), "--json")
    assert json.loads(proc.stdout)["counts"] == {"present": 2}


def test_a_noop_hydrate_is_fast_and_touches_nothing(built: Env) -> None:
    dest = built.tmp / "dest"
    built.run("hydrate", "--config", str(built.config), "--dest", str(dest))
    t0 = time.monotonic()
    proc = built.run("hydrate", "--config", str(built.config), "--dest", str(dest), "--json")
    wall = time.monotonic() - t0
    assert json.loads(proc.stdout)["noop"] is True
    assert wall < 1.0, f"no-op hydrate took {wall:.2f}s (target < 0.5s; benchmarks/hydrate_noop.py measures it)"


def test_the_hydrate_path_imports_no_torch_diffusers_sqlalchemy_or_cloud_sdk(built: Env) -> None:
    dest = built.tmp / "dest"
    code = (
        "import sys\nfrom cachekeeper.cli import main\n"
        f"sys.argv = ['cachekeeper', 'hydrate', '--config', {str(built.config)!r}, '--dest', {str(dest)!r}]\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "heavy = {'torch', 'diffusers', 'sqlalchemy', 'alembic', 'boto3', 'botocore', 'google', 'psycopg'}\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & heavy))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=built.vars, cwd=built.tmp)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
    assert (served(dest) / "large.bin").exists()


def test_coverage_exits_non_zero_while_a_deployment_would_compile(env: Env) -> None:
    absent = env.run("coverage", str(env.config), ok=False)   # read-only: it never creates the catalog
    assert absent.returncode == 5 and "no catalog at" in one_error_line(absent)
    env.run("db", "upgrade")
    missing = env.run("coverage", str(env.config), ok=False)
    assert missing.returncode == 1 and missing.stdout.count("MISSING") == 2
    env.run("prebuild", str(env.config))
    assert env.run("coverage", str(env.config)).stdout.count("built") == 2
    assert env.run("coverage", str(env.config), "--no-catalog").stdout.count("built") == 2
    other = env.run("coverage", str(env.config), ok=False, FAKE_TOOLCHAIN="2")
    assert other.returncode == 1  # another compiler: nothing counts as built


def test_coverage_names_the_worker_building_a_missing_entry(env: Env) -> None:
    from cachekeeper.catalog import Catalog

    env.run("db", "upgrade")
    rows = json.loads(env.run("coverage", str(env.config), "--json", ok=False).stdout)["entries"]
    fp_id, key = rows[0]["fingerprint_id"], rows[0]["key"]
    assert all(r["held_by"] is None for r in rows)
    with Catalog.open(f"sqlite:///{env.tmp / 'home' / 'catalog.db'}") as catalog:
        catalog.enqueue([(fp_id, key, "{}")])
        assert catalog.claim("w9", lease_s=300, fingerprint_id=fp_id) is not None
    held = json.loads(env.run("coverage", str(env.config), "--json", ok=False).stdout)["entries"]
    assert [r["held_by"] for r in held if r["key"] == key] == ["w9"]
    assert "(held by w9)" in env.run("coverage", str(env.config), ok=False).stdout


def test_a_lockfile_pins_exact_manifests(built: Env) -> None:
    lockfile = built.tmp / "ck.lock"
    built.run("lock", "--config", str(built.config), "-o", str(lockfile))
    pinned = json.loads(lockfile.read_text())
    assert len(pinned["manifests"]) == 3
    built.run("hydrate", "--lockfile", str(lockfile), "--dest", str(built.tmp / "d"))
    assert (served(built.tmp / "d") / "large.bin").exists()
    err = one_error_line(built.run("hydrate", "--lockfile", str(lockfile), "--dest", str(built.tmp / "e"),
                                   ok=False, FAKE_TOOLCHAIN="2"))
    assert "pins toolchain" in err


def test_catalog_rebuild_restores_the_index_from_the_store(built: Env) -> None:
    (built.tmp / "home" / "catalog.db").unlink()
    gone = built.run("ls", "--json", ok=False)
    assert gone.returncode == 5 and gone.stdout == "" and "no catalog at" in one_error_line(gone)
    built.run("catalog", "rebuild")
    assert len([json.loads(line) for line in built.run("ls", "--json").stdout.splitlines()]) == 2


def test_verify_and_gc(built: Env) -> None:
    store = built.tmp / "home" / "store"
    orphan = store / "blobs" / "sha256" / "00" / ("00" * 32)
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"left by a crashed publisher")
    assert "would delete" not in built.run("gc").stdout  # young: maybe a publish in flight
    plan = built.run("gc", "--min-age", "0")
    assert "would delete  blobs/sha256/00/" in plan.stdout and orphan.exists()
    built.run("gc", "--run", "--min-age", "0")
    assert not orphan.exists()
    built.run("verify", "--deep")
    victim = next(p for p in (store / "blobs").rglob("*") if p.is_file() and p.stat().st_size == 5 << 20)
    victim.write_bytes(b"truncated")
    bad = built.run("verify", ok=False)
    assert bad.returncode == 1 and "BAD" in bad.stdout
    repaired = built.run("verify", "--repair", ok=False)
    assert repaired.returncode == 1 and "removed  blobs/" in repaired.stdout
    # The repair dropped the entry's catalog row too: prebuild rebuilds it with no extra flag.
    assert json.loads(built.run("prebuild", str(built.config), "--json").stdout)["counts"] == {"built": 1,
                                                                                                "present": 1}
    built.run("verify", "--deep")


# --- bad input: one clear line, a non-zero exit, nothing partial --------------------------------------


def test_malformed_yaml(env: Env) -> None:
    env.config.write_text("version: 1\nmodels: [\n")
    err = one_error_line(env.run("prebuild", str(env.config), ok=False))
    assert str(env.config) in err


def test_unknown_model_path(env: Env) -> None:
    env.config.write_text(config_text(env.tmp / "no-such-model"))
    err = one_error_line(env.run("prebuild", str(env.config), ok=False))
    assert "no-such-model" in err and "does not exist" in err
    assert not (env.tmp / "home" / "store" / "manifests").exists()


def test_unwritable_destination(built: Env) -> None:
    blocker = built.tmp / "file"
    blocker.write_text("")
    err = one_error_line(built.run("hydrate", "--config", str(built.config), "--dest", str(blocker / "d"), ok=False))
    assert "cannot create directory" in err


def test_missing_store(env: Env) -> None:
    err = one_error_line(env.run("hydrate", "--config", str(env.config), "--store", f"file://{env.tmp}/nope",
                                 "--dest", str(env.tmp / "d"), ok=False))
    assert "does not exist" in err


def test_a_corrupted_blob_is_refused_and_nothing_partial_is_written(built: Env) -> None:
    store = built.tmp / "home" / "store"
    victim = next(p for p in (store / "blobs").rglob("*") if p.is_file() and p.stat().st_size == 5 << 20)
    data = bytearray(victim.read_bytes())
    data[-1] ^= 1
    victim.write_bytes(bytes(data))
    dest = built.tmp / "dest"
    proc = built.run("hydrate", "--config", str(built.config), "--dest", str(dest), ok=False)
    assert "failed verification" in one_error_line(proc) and proc.returncode == 4
    assert not (dest / "large.bin").exists() and not list(dest.rglob("*.ck-tmp"))


def test_a_host_with_another_toolchain_gets_a_miss_that_says_why(built: Env) -> None:
    err = one_error_line(built.run("hydrate", "--config", str(built.config), "--dest", str(built.tmp / "d"),
                                   ok=False, FAKE_TOOLCHAIN="2"))
    assert "toolchain='1' (host '2')" in err


def test_a_failing_build_is_recorded_with_its_log_tail_and_publishes_nothing(env: Env) -> None:
    proc = env.run("prebuild", str(env.config), ok=False, FAKE_BUILD_FAIL="1")
    assert proc.returncode == 7 and "internal error at graph 7" in proc.stderr
    assert "2 of 2 entries failed" in one_error_line(proc)
    assert not list((env.tmp / "home" / "store").glob("manifests/*/*.json"))


def test_a_build_that_hangs_is_killed_at_the_timeout(env: Env) -> None:
    env.config.write_text(config_text(env.model, build="build: {timeout: 1}"))
    t0 = time.monotonic()
    proc = env.run("prebuild", str(env.config), "--model", "tiny", ok=False, FAKE_BUILD_SLEEP="60")
    assert "timed out after" in proc.stderr and time.monotonic() - t0 < 30


def test_an_unusable_backend_is_one_line(env: Env) -> None:
    err = one_error_line(env.run("prebuild", str(env.config), ok=False, FAKE_UNAVAILABLE="fake-sdk not installed"))
    assert "fake-sdk not installed" in err


def test_two_workers_on_one_catalog_build_each_entry_once(env: Env) -> None:
    env.config.write_text(config_text(env.model).replace("height: [64, 128]", "height: [64, 128, 192, 256]"))
    # --wait: a worker whose queue runs dry waits for the other's builds, so both exit 0 (all built).
    argv = [sys.executable, "-m", "cachekeeper", "prebuild", str(env.config), "--json", "--wait"]
    slow = {**env.vars, "FAKE_BUILD_SLEEP": "1"}
    env.run("db", "upgrade")  # both workers then open a migrated catalog
    procs = [subprocess.Popen([*argv, "--worker", f"w{i}"], env=slow, cwd=env.tmp, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    built = [o["key"] for out, _ in outs for o in json.loads(out)["outcomes"] if o["status"] == "built"]
    assert sorted(built) == sorted(set(built)) and len(built) == 4
    assert all(json.loads(out)["counts"].get("built", 0) >= 1 for out, _ in outs), "both workers took work"


def test_hydrate_can_select_shapes_and_refuses_one_the_config_does_not_declare(built: Env) -> None:
    dest = built.tmp / "dest"
    report = json.loads(built.run("hydrate", "--config", str(built.config), "--dest", str(dest), "--shape",
                                  "128x64x1", "--json").stdout)
    assert len([m for m in report["manifests"] if not m.startswith("shared-")]) == 1
    err = one_error_line(built.run("hydrate", "--config", str(built.config), "--dest", str(built.tmp / "e"),
                                   "--shape", "1024x1024x1", ok=False))
    assert "declares no shape 1024x1024x1" in err and "64x64x1" in err
    assert not (built.tmp / "e").exists()


def test_signed_publishing_and_a_boot_hook_that_trusts_only_its_key(env: Env) -> None:
    key = env.tmp / "ck.key"
    public = env.run("keygen", "-o", str(key)).stdout.strip()
    assert public.startswith("ed25519:") and (key.stat().st_mode & 0o777) == 0o600
    env.run("prebuild", str(env.config), "--sign-key", str(key))
    env.run("hydrate", "--config", str(env.config), "--dest", str(env.tmp / "d"), "--trusted-key", public)
    other = env.run("keygen", "-o", str(env.tmp / "other.key")).stdout.strip()
    err = one_error_line(env.run("hydrate", "--config", str(env.config), "--dest", str(env.tmp / "e"),
                                 ok=False, CACHEKEEPER_TRUSTED_KEYS=other))
    assert "not trusted" in err and not list((env.tmp / "e").rglob("large.bin"))
