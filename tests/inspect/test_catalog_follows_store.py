"""The catalog follows the store (gc and verify --repair drop the rows of what they delete, so coverage
and prebuild see the truth), and read-only commands never create or migrate a catalog."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_env import Env, one_error_line


@pytest.fixture()
def built(tmp_path: Path) -> Env:
    env = Env(tmp_path)
    env.run("prebuild", str(env.config))
    return env


def counts(env: Env) -> dict[str, int]:
    return dict(json.loads(env.run("prebuild", str(env.config), "--json").stdout)["counts"])


def test_after_gc_drops_a_toolchain_coverage_says_missing_and_prebuild_rebuilds(built: Env) -> None:
    [fp] = [p.name for p in (built.tmp / "home" / "store" / "manifests").iterdir()]
    built.run("gc", "--drop", fp, "--min-age", "0", "--run")
    assert built.run("coverage", str(built.config), ok=False).returncode == 1
    assert counts(built) == {"built": 2}, "no --verify-store needed"


def an_entry_only_blob(env: Env) -> Path:
    """A blob that one entry manifest names and no other manifest (a shared set's blob would break no entry)."""
    store = env.tmp / "home" / "store"
    docs = {p: json.loads(p.read_bytes()) for p in sorted((store / "manifests").rglob("*.json"))}

    def digests(doc: dict[str, list[dict[str, str]]]) -> set[str]:
        return {b["digest"] for b in doc["blobs"]}

    entry = next(p for p in docs if not p.name.startswith("shared-") and "captured" not in p.parts)
    others = set().union(*(digests(d) for p, d in docs.items() if p != entry))
    digest = sorted(digests(docs[entry]) - others)[0]
    return next(p for p in (store / "blobs").rglob("*") if p.name == digest)


def test_after_verify_repair_the_entry_is_missing_until_prebuild_rebuilds_it(built: Env) -> None:
    an_entry_only_blob(built).unlink()
    proc = built.run("verify", "--repair", "--json", ok=False)
    doc = json.loads(proc.stdout)   # one document on stdout, no text lines
    assert proc.returncode == 1 and doc["catalog_rows_removed"] == len(doc["problems"]) >= 1
    cover = json.loads(built.run("coverage", str(built.config), "--json", ok=False).stdout)
    assert cover["missing"] == len(doc["problems"])
    assert counts(built)["built"] == len(doc["problems"])
    built.run("coverage", str(built.config))


@pytest.mark.parametrize("argv", [["ls"], ["ls", "--json"], ["ls", "--captured"], ["stats"], ["diff", "a", "b"]])
def test_inspection_names_a_missing_catalog_and_creates_nothing(tmp_path: Path, argv: list[str]) -> None:
    env = Env(tmp_path)
    typo = tmp_path / "typo" / "dir" / "c.db"
    proc = env.run(*argv, "--catalog", f"sqlite:///{typo}", ok=False)
    assert proc.returncode == 5 and f"no catalog at {typo}" in one_error_line(proc)
    assert "prebuild" in proc.stderr and "db upgrade" in proc.stderr
    assert not (tmp_path / "typo").exists()


def test_inspection_does_not_migrate_an_older_catalog_and_names_its_revision(tmp_path: Path) -> None:
    env = Env(tmp_path)
    url = f"sqlite:///{tmp_path / 'old.db'}"
    env.run("db", "upgrade", "--catalog", url)
    env.run("db", "downgrade", "0002", "--catalog", url)
    for argv in (["ls"], ["stats"], ["coverage", str(env.config)]):
        proc = env.run(*argv, "--catalog", url, ok=False)
        assert proc.returncode == 5 and "at revision 0002" in one_error_line(proc)
    assert env.run("db", "current", "--catalog", url).stdout.strip() == "0002"
