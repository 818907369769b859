"""One contract at the plugin boundary: whatever a store or backend plugin raises outside its contract is one
store (or backend) error naming the plugin, and `--best-effort` softens a store's like any other store failure.

The store is tests/plugins/dir2, a real package built and installed by pip (`dir2_site`), which implements
only what docs/stores.md requires and raises plain exceptions on demand (CK_DIR2_FAULT), as a store over an
SDK nobody wrapped does; the backend is the echo plugin (ECHO_FAULT). Everything runs through the real CLI
in fresh processes (`Plugged` asserts that no traceback is printed).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from .distributions import HERE, Plugged, echo_config
from .test_store_plugin import one_error

ECHO = {"CACHEKEEPER_BACKENDS": "echo=ck_echo_backend:EchoBackend"}
STORE = "dir2://team/cache"
PLUGIN = "store plugin dir2 (ck_dir2:Dir2Store from ck-dir2)"
PLUGIN_HINT = ("hint: the store plugin raised {}, which the store contract does not allow (docs/stores.md): check "
               "the store and the plugin's settings, and report it to the plugin's maintainers")


class Dir2:
    """A cwd with a config, the echo backend and an entry published into dir2://team/cache (once per module:
    the tests only read it, each into a dest of its own)."""

    def __init__(self, plugged: Plugged, site: Path) -> None:
        self.plugged, self.cwd = plugged, plugged.cwd
        plugged.env.update(ECHO, PYTHONPATH=f"{site}:{plugged.env['PYTHONPATH']}",
                           CK_DIR2_ROOT=str(plugged.cwd / "volumes"))
        self.dest = self.cwd / "dest"
        self.config = echo_config(self.cwd)
        built = plugged.cachekeeper("prebuild", str(self.config), "--store", STORE)
        assert built.returncode == 0, built.stderr

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return self.plugged.cachekeeper(*args, **env)

    def hydrate(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return self.run("hydrate", "--config", str(self.config), "--store", STORE, "--dest", str(self.dest),
                        "--json", *args, **env)


@pytest.fixture(scope="module")
def published(plugin_site: Path, dir2_site: Path, tmp_path_factory: pytest.TempPathFactory) -> Dir2:
    return Dir2(Plugged(plugin_site, tmp_path_factory.mktemp("dir2")), dir2_site)


@pytest.fixture
def dir2(published: Dir2, tmp_path: Path) -> Iterator[Dir2]:
    env = dict(published.plugged.env)
    published.dest = tmp_path / "dest"
    yield published
    published.plugged.env = env


def warning(proc: subprocess.CompletedProcess[str]) -> str:
    [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning: ")]
    assert not any(ln.startswith("error: ") for ln in proc.stderr.splitlines()), proc.stderr
    return line


# --- the store's reads ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["ConnectionResetError", "KeyError", "Exception"])
def test_a_plugin_read_raising_a_plain_exception_is_softened_by_best_effort_naming_the_plugin(
        dir2: Dir2, fault: str) -> None:
    proc = dir2.hydrate("--best-effort", CK_DIR2_FAULT=f"get_range:{fault}")
    assert proc.returncode == 0, proc.stderr
    line = warning(proc)
    assert line.startswith("warning: hydrate incomplete (1 of 1 blobs could not be fetched ")
    assert f"({PLUGIN} failed reading blobs/sha256/" in line and f": {fault}: " in line
    # A reset may be the network's: retried, then given up. A KeyError is the plugin's bug: not retried.
    assert line.endswith("(gave up after 8 attempts)); 0 files placed and kept); the server compiles what is missing") \
        is (fault == "ConnectionResetError")
    report = json.loads(proc.stdout)
    assert report["incomplete"] and PLUGIN in report["incomplete"] and report["files_fetched"] == 0


def test_without_best_effort_a_plugin_read_raising_a_key_error_is_exit_11_in_one_line(dir2: Dir2) -> None:
    proc = dir2.hydrate(CK_DIR2_FAULT="get_range:KeyError")
    error, hint = one_error(proc)
    assert proc.returncode == 11
    assert error.startswith(f"error: 1 of 1 blobs could not be fetched ({PLUGIN} failed reading blobs/sha256/")
    assert error.endswith(": KeyError: 'dir2 fault injected in get_range'); 0 files placed and kept")
    assert hint.startswith("hint: rerun to fetch the rest")


def test_a_reset_another_attempt_cures_is_retried_and_the_hydrate_completes(dir2: Dir2) -> None:
    proc = dir2.hydrate(CK_DIR2_FAULT="get_range:ConnectionResetError:2")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert (report["incomplete"], report["files_fetched"], report["retries"]) == ("", 3, 2)


def test_a_key_error_from_the_plugins_open_url_is_a_store_error_best_effort_softens(dir2: Dir2) -> None:
    del dir2.plugged.env["CK_DIR2_ROOT"]   # the plugin reads os.environ["CK_DIR2_ROOT"]
    soft = dir2.hydrate("--best-effort")
    assert soft.returncode == 0, soft.stderr
    assert warning(soft) == (f"warning: hydrate incomplete ({PLUGIN} failed opening {STORE}: KeyError: "
                             "'CK_DIR2_ROOT'); the server compiles what is missing")
    hard = dir2.hydrate()
    assert hard.returncode == 3
    assert one_error(hard) == (f"error: {PLUGIN} failed opening {STORE}: KeyError: 'CK_DIR2_ROOT'",
                               PLUGIN_HINT.format("KeyError"))


@pytest.mark.parametrize(("command", "fault", "doing"), [
    (["verify"], "list_info:ConnectionResetError", "listing manifests/"),
    (["verify", "--deep"], "get_bytes:TimeoutError", "reading manifests/"),
    (["gc"], "list_info:Exception", "listing manifests/"),
], ids=["verify", "verify-deep", "gc"])
def test_verify_and_gc_on_a_plugin_raising_a_plain_exception_exit_3_in_one_line(
        dir2: Dir2, command: list[str], fault: str, doing: str) -> None:
    proc = dir2.run(*command, "--store", STORE, CK_DIR2_FAULT=fault)
    error, hint = one_error(proc)
    kind = fault.partition(":")[2]
    assert proc.returncode == 3
    assert error.startswith(f"error: {PLUGIN} failed {doing}") and f": {kind}: dir2 fault injected in " in error
    assert hint == PLUGIN_HINT.format(kind)


def test_the_plugin_with_only_the_required_methods_passes_the_suite_which_skips_what_it_lacks(
        dir2: Dir2) -> None:
    """docs/stores.md makes `download`, `debris_note` and the debris hooks optional: the suite agrees, and
    its fault tests run on this store too."""
    proc = dir2.plugged.python("-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest", "-rs",
                               str(HERE / "dir2" / "conformance.py"), timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:]
    summary = proc.stdout.strip().splitlines()[-1]
    assert "failed" not in summary and "error" not in summary, summary
    assert int(summary.split(" passed")[0].split()[-1]) >= 110, summary   # the suite ran, its fault tests too
    assert "Dir2Store has no debris hooks (optional): gc lists nothing of it" in proc.stdout


# --- the backend's probes ------------------------------------------------------------------------------


def test_a_backend_plugin_probe_raising_a_plain_exception_is_one_backend_error_naming_the_plugin(
        dir2: Dir2) -> None:
    proc = dir2.hydrate("--best-effort", ECHO_FAULT="KeyError")
    assert proc.returncode == 6
    assert one_error(proc) == (
        "error: echo: the backend plugin (ck_echo_backend:EchoBackend) failed in fingerprint(): KeyError: "
        "'echo fault injected in fingerprint'",
        "hint: the plugin raised KeyError, which the backend contract does not allow (docs/backends.md): check its "
        "settings, and report it to the plugin's maintainers")
    doctor = dir2.run("doctor", "--backend", "echo", ECHO_FAULT="TimeoutError")
    assert doctor.returncode == 6, doctor.stderr
    assert doctor.stdout.splitlines()[0] == ("echo: not usable: the backend plugin (ck_echo_backend:EchoBackend) "
                                             "failed in fingerprint(): TimeoutError: echo fault injected in "
                                             "fingerprint")
