"""A store from an outside package is reached from its URL: the package registers its scheme in the
`cachekeeper.stores` entry-point group (stores/schemes.py), as cachekeeper's own file/s3/gs do.

The plugin (tests/plugins/dirstore) is installed as a distribution in a temp site dir (distributions.py) and
used from fresh processes, through the real `cachekeeper` command.
"""

from __future__ import annotations

import json
from pathlib import Path

from .distributions import HERE, Plugged, echo_config, write_dist_info

ECHO = {"CACHEKEEPER_BACKENDS": "echo=ck_echo_backend:EchoBackend"}
STORE = "dirstore://team/cache"


def one_error(proc: object) -> tuple[str, str]:
    """The `error:` and `hint:` lines of a failed command: exactly one of each."""
    stderr: str = proc.stderr  # type: ignore[attr-defined]
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    hints = [line for line in stderr.splitlines() if line.startswith("hint: ")]
    assert len(errors) == 1 and len(hints) == 1, stderr
    return errors[0], hints[0]


def test_the_plugin_store_passes_store_conformance_opened_from_its_url(plugged: Plugged) -> None:
    proc = plugged.python("-m", "pytest", "-q", "-p", "no:cacheprovider", "--noconftest",
                          str(HERE / "dirstore" / "conformance.py"), timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:]
    summary = proc.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "error" not in summary, summary
    assert int(summary.split(" passed")[0].split()[-1]) >= 70   # the whole suite ran, not a stub of it


def test_an_entry_published_to_the_plugin_store_hydrates_from_its_url(plugged: Plugged) -> None:
    config = echo_config(plugged.cwd)
    built = plugged.cachekeeper("prebuild", str(config), "--store", STORE, "--json", **ECHO)
    assert built.returncode == 0, built.stderr
    blobs = list((plugged.cwd / "volumes" / "team" / "cache").rglob("*.json"))
    assert blobs, "prebuild published nothing into the plugin store's directory"

    dest = plugged.cwd / "dest"
    proc = plugged.cachekeeper("hydrate", "--config", str(config), "--store", STORE, "--dest", str(dest),
                               "--json", **ECHO)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    served = Path(report["dest"])
    placed = sorted(p.relative_to(served).as_posix() for p in served.rglob("*.bin"))
    assert report["files_fetched"] == len(placed) == 3
    assert all(p.read_text().split()[1:] == ["tiny", p.stem[-1]] for p in served.rglob("*.bin"))
    assert not (served / "compile.lock").exists()


def test_opening_a_file_store_loads_no_plugin(plugged: Plugged) -> None:
    code = ("import sys, tempfile; from cachekeeper.stores import open_store, installed_schemes; "
            "open_store(tempfile.mkdtemp()).put_bytes('k', b'v'); print(installed_schemes()); "
            "assert 'ck_dirstore' not in sys.modules; "
            "assert 'cachekeeper.stores.plugin' not in sys.modules, 'the plugin boundary loaded for a file store'")
    proc = plugged.python("-c", code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['dirstore', 'file', 'gs', 's3']"


def test_an_unknown_scheme_is_one_error_listing_the_installed_schemes(plugged: Plugged) -> None:
    proc = plugged.cachekeeper("verify", "--store", "ftp://x/y")
    error, hint = one_error(proc)
    assert proc.returncode == 2
    assert error == ("error: unsupported store URL scheme 'ftp' in 'ftp://x/y' "
                     "(installed schemes: dirstore, file, gs, s3)")
    assert hint == ("hint: install the package that registers ftp:// in the entry-point group cachekeeper.stores, "
                    "or use an installed scheme")


def test_a_misspelt_plugin_scheme_suggests_it(plugged: Plugged) -> None:
    proc = plugged.cachekeeper("verify", "--store", "dirstor://team/cache")
    assert proc.returncode == 2
    assert one_error(proc)[1] == "hint: did you mean dirstore://team/cache?"


def test_a_scheme_two_packages_register_is_refused_naming_both(plugged: Plugged, tmp_path: Path) -> None:
    other = tmp_path / "other-site"
    other.mkdir()
    write_dist_info(other, "ck-other", "2.0", {"cachekeeper.stores": {"dirstore": "ck_other:Store"}})
    proc = plugged.cachekeeper("verify", "--store", STORE,
                               PYTHONPATH=f"{other}:{plugged.env['PYTHONPATH']}")
    error, hint = one_error(proc)
    assert proc.returncode == 2
    assert error == ("error: store scheme 'dirstore' is registered more than once: ck_other:Store from ck-other; "
                     "ck_dirstore:DirStore from ck-dirstore")
    assert hint == "hint: uninstall all but one of the packages that provide dirstore://"


def test_a_plugin_that_cannot_be_loaded_is_one_error_line(plugged: Plugged, tmp_path: Path) -> None:
    broken = tmp_path / "broken-site"
    broken.mkdir()
    write_dist_info(broken, "ck-broken", "1.0", {"cachekeeper.stores": {"broken": "ck_no_such_module:Store"}})
    proc = plugged.cachekeeper("verify", "--store", "broken://b/p", PYTHONPATH=f"{broken}:{plugged.env['PYTHONPATH']}")
    error, _ = one_error(proc)
    assert proc.returncode == 2
    assert error == ("error: store scheme 'broken' (ck_no_such_module:Store from ck-broken) cannot be loaded: "
                     "No module named 'ck_no_such_module'")
