"""The days a fleet meets most often, through the real command: the first boot of a new image (nothing
built for its toolchain), an image upgrade on a persistent cache disk, and the boot files in deploy/boot
run against a store that holds nothing for the host's toolchain."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_env import Env
from tests.deploy.conftest import invocations


@pytest.fixture()
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning: ")]


def test_best_effort_boots_when_nothing_is_built_for_this_toolchain(env: Env) -> None:
    env.run("prebuild", str(env.config))    # built for toolchain 1; this host is toolchain 2
    dest = env.tmp / "dest"
    proc = env.run("hydrate", "--config", str(env.config), "--dest", str(dest), "--best-effort", "--json",
                   FAKE_TOOLCHAIN="2")
    doc = json.loads(proc.stdout)   # the summary is written, alone on stdout
    assert doc["nothing_built"] and len(doc["missing"]) == 2 and doc["manifests"] == []
    assert doc["explanations"][0]["nearest"][0]["differs"]["toolchain"] == {"built": "1", "host": "2"}
    [warning] = warnings(proc.stderr)
    assert "lacks 2 of 2 wanted entries" in warning and "cause: " in warning
    printed = env.run("hydrate", "--config", str(env.config), "--dest", str(dest), "--best-effort",
                      "--print-env", FAKE_TOOLCHAIN="2")
    [line] = printed.stdout.splitlines()
    assert line.startswith("export FAKE_CACHE_DIR=") and line.endswith(str(dest / doc["fingerprint_id"]))


@pytest.mark.parametrize("store", ["missing-dir", "empty-dir"])
def test_best_effort_boots_on_an_empty_or_absent_store(env: Env, store: str) -> None:
    url = env.tmp / store
    if store == "empty-dir":
        url.mkdir()
    proc = env.run("hydrate", "--config", str(env.config), "--dest", str(env.tmp / "d"), "--store",
                   f"file://{url}", "--best-effort", "--json")
    assert json.loads(proc.stdout)["incomplete"] and len(warnings(proc.stderr)) == 1
    assert env.run("hydrate", "--config", str(env.config), "--dest", str(env.tmp / "d"), "--store",
                   f"file://{url}", ok=False).returncode == (8 if store == "empty-dir" else 3)


def test_a_run_that_placed_nothing_claims_nothing(env: Env) -> None:
    env.run("prebuild", str(env.config))
    dest = env.tmp / "dest"
    assert env.run("hydrate", "--config", str(env.config), "--dest", str(dest), ok=False,
                   FAKE_TOOLCHAIN="2").returncode == 8
    assert not list(dest.rglob("state.json")), "nothing was placed, so no state names toolchain 2"
    proc = env.run("hydrate", "--config", str(env.config), "--dest", str(dest), "--json")
    assert json.loads(proc.stdout)["files_fetched"] == 16


def test_an_image_upgrade_on_a_persistent_dest_hydrates_the_new_toolchain(env: Env) -> None:
    env.run("prebuild", str(env.config))
    env.run("prebuild", str(env.config), FAKE_TOOLCHAIN="2")
    dest = env.tmp / "dest"
    a = json.loads(env.run("hydrate", "--config", str(env.config), "--dest", str(dest), "--json").stdout)
    b = json.loads(env.run("hydrate", "--config", str(env.config), "--dest", str(dest), "--json",
                           FAKE_TOOLCHAIN="2").stdout)
    served_a, served_b = Path(a["dest"]), Path(b["dest"])
    assert served_a.parent == served_b.parent == dest and served_a != served_b
    assert b["files_fetched"] == 16, "B's own dir: nothing of A is adopted or mixed in"
    state_b = json.loads((served_b / ".cachekeeper" / "state.json").read_text())
    on_disk = {p.relative_to(served_b).as_posix() for p in served_b.rglob("*")
               if p.is_file() and ".cachekeeper" not in p.parts}
    assert {k.partition("/")[2] for k in state_b["files"] if k.startswith("cache/")} == on_disk
    assert env.run("env", "--config", str(env.config), "--dest", str(dest),
                   FAKE_TOOLCHAIN="2").stdout == f"export FAKE_CACHE_DIR={served_b}\n"

    plan = env.run("gc", "--dest", str(dest), "--json")
    assert [json.loads(line)["path"] for line in plan.stdout.splitlines()] == [str(served_a)]
    assert served_a.exists(), "gc plans unless --run"
    env.run("gc", "--dest", str(dest), "--run")
    assert not served_a.exists() and served_b.exists()
    again = env.run("hydrate", "--config", str(env.config), "--dest", str(dest), "--json", FAKE_TOOLCHAIN="2")
    assert json.loads(again.stdout)["noop"]


def test_capture_finds_the_toolchain_dir_of_the_dest_it_is_given(env: Env) -> None:
    env.run("prebuild", str(env.config))
    dest = env.tmp / "dest"
    served = Path(json.loads(env.run("hydrate", "--config", str(env.config), "--dest", str(dest),
                                     "--json").stdout)["dest"])
    (served / "runtime.neff").write_bytes(b"compiled at runtime")
    listed = env.run("capture", "--dest", str(dest), "--settle", "0")
    assert listed.stdout.splitlines() == ["runtime.neff"]


def _boot_argv(argv: list[str], env: Env, store: Path) -> list[str]:
    """A boot file's line with this test's config, dest and store in place of the deployment's."""
    values = {"--config": str(env.config), "--dest": str(env.tmp / "cache"), "--store": f"file://{store}",
              "--output": str(env.tmp / "out.env")}
    out = [values.get(argv[i - 1], a) if i else a for i, a in enumerate(argv)]
    return out if "--store" in out or out[0] != "hydrate" else [*out, "--store", f"file://{store}"]


@pytest.mark.parametrize(("where", "argv"), [(w, a) for w, a in invocations() if a[0] in ("hydrate", "env")],
                         ids=lambda v: v if isinstance(v, str) else None)
def test_each_boot_file_starts_the_server_when_the_store_holds_nothing_for_this_host(
        env: Env, where: str, argv: list[str]) -> None:
    store = env.tmp / "store"
    env.run("prebuild", str(env.config), "--store", f"file://{store}", FAKE_TOOLCHAIN="old-image")
    env_vars = {"CACHEKEEPER_DEADLINE": "30", "CACHEKEEPER_STORE": f"file://{store}"}
    proc = env.run(*_boot_argv(argv, env, store), ok=False, **env_vars)
    assert proc.returncode == 0, f"{where}: {proc.stderr}"
    if argv[0] == "hydrate":
        assert len(warnings(proc.stderr)) == 1
        if "--print-env" in argv:
            assert proc.stdout.startswith("export FAKE_CACHE_DIR=")


@pytest.mark.parametrize(("where", "argv"), [(w, a) for w, a in invocations() if a[0] == "report"],
                         ids=lambda v: v if isinstance(v, str) else None)
def test_each_boot_files_report_sends_what_the_server_spooled(env: Env, where: str, argv: list[str]) -> None:
    from cachekeeper.format.spool import CallRecord
    from cachekeeper.runtime.miss_watch import Spool

    store, spool = env.tmp / "store", env.tmp / "spool"
    env.run("prebuild", str(env.config), "--store", f"file://{store}")
    Spool(spool).append(CallRecord("tiny", 96, 64, 1, None, None, True, 1, 0.3, 1.7e9))
    once = [a for i, a in enumerate(argv) if "--watch" not in (a, argv[i - 1])]   # the shutdown round
    proc = env.run(*_boot_argv(once, env, store), "--json", ok=False, CACHEKEEPER_STORE=f"file://{store}",
                   CACHEKEEPER_SPOOL=str(spool))
    assert proc.returncode == 0, f"{where}: {proc.stderr}"
    assert json.loads(proc.stdout)["calls"] == 1
    assert len(list((store / "reports").rglob("*.json"))) == 1 and not list(spool.iterdir())
