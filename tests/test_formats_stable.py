"""Public formats stay byte-identical across refactors: entry keys, manifests and the lockfile of the example
configs (and tests/formats_golden/matrix.yaml) are what the code before the layer folders (e9de0bc) wrote.

The goldens under tests/formats_golden/<config>/ were written by tests/formats_golden/generate.py run
against that commit (its docstring says how, and what is pinned or normalised); this test runs the same
script against the current code. A difference is a format change: every stored artifact would miss, and
lockfiles already deployed would pin nothing. Change a golden only with a format version bump."""

from __future__ import annotations

from pathlib import Path

from tests.formats_golden.generate import CONFIGS, generate

GOLDEN = Path(__file__).resolve().parent / "formats_golden"


def golden_files() -> list[Path]:
    return sorted(p.relative_to(GOLDEN) for name in CONFIGS for p in (GOLDEN / name).rglob("*.json"))


def test_the_goldens_cover_keys_manifests_and_a_lockfile_of_every_config() -> None:
    files = golden_files()
    for name in CONFIGS:
        mine = [f for f in files if f.parts[0] == name]
        assert Path(name, "keys.json") in mine and Path(name, "lock.json") in mine
        manifests = [f for f in mine if f.parts[1] == "manifests"]
        assert any(f.stem.startswith("pch-") for f in manifests)                 # a shared set
        assert any(not f.stem.startswith("pch-") for f in manifests)             # and entries


def test_keys_manifests_and_lockfiles_are_byte_identical(tmp_path: Path) -> None:
    made = generate(tmp_path)
    expected = golden_files()
    assert len(expected) >= 30                      # not vacuous: 3 configs: 3 key lists, 24 manifests, 3 lockfiles
    named = sorted(set(made) ^ set(expected))   # a key or fingerprint id that changed renames files
    assert named == [], f"{len(named)} files are new or gone, e.g. {[str(f) for f in named[:4]]}"
    changed = [str(f) for f in expected if (tmp_path / f).read_bytes() != (GOLDEN / f).read_bytes()]
    assert changed == [], f"{len(changed)} of {len(expected)} files changed bytes: {changed[:5]}"


# --- manifest schema 3: relocatable files (format/relocate.py), written by this code on purpose ------------

RELOCATED = GOLDEN / "relocated" / "manifest.json"


def relocated_manifest(tmp: Path) -> bytes:
    """An Inductor entry's manifest whose files name the build's root (padded to RESERVED bytes, as
    InductorBackend.build_roots makes it): pinned inputs, so the bytes are the same on every host."""
    from cachekeeper.backends.inductor import InductorBackend
    from cachekeeper.format.fingerprint import Fingerprint
    from cachekeeper.format.spec import EntrySpec, Shape
    from cachekeeper.publish.upload import publish
    from cachekeeper.stores.memory import MemoryStore

    backend = InductorBackend()
    root = backend.build_roots(tmp / "ck-build-golden")["cache"]
    (root / "fxgraph" / "fk").mkdir(parents=True)
    (root / "fxgraph" / "fk" / "entry").write_bytes(f"filename={root}/ab/cabkernel.py".encode())
    (root / "ab").mkdir()
    (root / "ab" / "cabkernel.py").write_bytes(b"# kernel\n")
    spec = EntrySpec(model="tiny-flux", component="transformer", backend="inductor", mode="full",
                     shape=Shape(64, 64, 1), dtype="float32")
    fp = Fingerprint.of("inductor", {"torch": "2.13.0", "device": "cuda", "gpu": "NVIDIA H200", "gpu_cc": "9.0"})
    manifest = publish(MemoryStore(), fingerprint=fp, spec=spec, roots={"cache": root}, include=backend.include,
                       build={"result": {"aot_dir": f"{root}/ck-aot/x"}},
                       relocatable_roots=backend.relocatable_roots).manifest
    return manifest.to_bytes()


def test_a_manifest_with_relocatable_files_is_byte_identical_to_its_golden(tmp_path: Path) -> None:
    made = relocated_manifest(tmp_path)
    assert b'"schema":3' in made and b'"relocate":200' in made and b"${cache}/ck-aot/x" in made
    assert made == RELOCATED.read_bytes(), "schema 3 changed: bump the manifest version, then regenerate " \
                                           "(python -m tests.test_formats_stable)"


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as work:
        RELOCATED.parent.mkdir(exist_ok=True)
        RELOCATED.write_bytes(relocated_manifest(Path(work)))
    print(f"wrote {RELOCATED}")
