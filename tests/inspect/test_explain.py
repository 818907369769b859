"""`explain` planning: the nearest built toolchains, the fields that differ, one hint per common cause."""

from __future__ import annotations

from pathlib import Path

from cachekeeper.format.fingerprint import Fingerprint
from cachekeeper.inspection.explain import explain_entry, explain_from_store, hint
from cachekeeper.stores import open_store
from tests.inspect.helpers import HOST, OTHER, THIRD, manifest, publish, specs, write_config

CPU = {"torch": "2.13.0", "cpu_isa": "avx512", "omp_threads": "8", "cxx_id": "g++ 12", "python": "3.11.2"}


def test_each_common_cause_gets_its_own_hint() -> None:
    assert "OMP_NUM_THREADS is unset here (default 16 threads); export OMP_NUM_THREADS=8" in hint(
        "omp_threads", "8", "default:16")
    assert "unset on both sides and the core counts differ (8 built, 2 here)" in hint(
        "omp_threads", "default:8", "default:2")
    assert "OMP_NUM_THREADS is 4 here and 8 on the builders" in hint("omp_threads", "8", "4")
    assert "different CPU instruction set (avx512 built, avx2 here)" in hint("cpu_isa", "avx512", "avx2")
    assert "never force ATEN_CPU_CAPABILITY" in hint("cpu_isa", "avx512", "avx2")
    assert "package version: torch 2.13.0 built, 2.14.0 here" in hint("torch", "2.13.0", "2.14.0")
    assert "compiler flag/setting cc_flags differs" in hint("cc_flags", "--model-type=transformer", "")
    assert "only the builders record 'env.X'" in hint("env.X", "1", "∅")
    assert "torch is installed at another path" in hint("torch_path", "/opt/venv/torch", "/usr/lib/torch")


def test_a_miss_names_the_nearest_toolchains_fewest_differences_first() -> None:
    host = Fingerprint.of("inductor", CPU | {"omp_threads": "default:16", "cpu_isa": "avx2"})
    near = Fingerprint.of("inductor", CPU | {"omp_threads": "default:16"})          # ISA only
    far = Fingerprint.of("inductor", CPU)                                           # ISA and threads
    other_backend = Fingerprint.of("neuron", {"torch": "2.13.0"})
    e = explain_entry(host, "k" * 32, "flux", [far, near, other_backend])
    assert not e.hit and e.built_elsewhere == 2
    assert [n.fingerprint_id for n in e.nearest] == [near.id, far.id]
    assert e.nearest[0].differs == {"cpu_isa": ("avx512", "avx2")}
    assert set(e.nearest[1].differs) == {"cpu_isa", "omp_threads"}
    text = "\n".join(e.lines())
    assert text.startswith("MISS  kkkkkkkkkkkk  flux: not built for this host's toolchain")
    assert "cpu_isa: 'avx512' (built) vs 'avx2' (this host)" in text and "hint: different CPU instruction set" in text


def test_a_hit_and_a_never_built_entry() -> None:
    host = Fingerprint.of("inductor", CPU)
    assert explain_entry(host, "k" * 32, "flux", [host]).hit
    never = explain_entry(host, "k" * 32, "flux", [])
    assert not never.hit and never.nearest == ()
    assert "no toolchain has it built" in never.lines()[1]


def test_the_store_alone_explains_misses_as_the_catalog_does(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path / 'store'}", create=True)
    built, other_only, nowhere = specs(write_config(tmp_path))[:3]
    publish(None, store, manifest(built, HOST), manifest(built, OTHER), manifest(other_only, OTHER),
            manifest(other_only, THIRD))
    hit, miss, never = explain_from_store(store, HOST, [built.key, other_only.key, nowhere.key])
    assert hit.hit and not miss.hit and not never.hit
    assert [n.fingerprint_id for n in miss.nearest] == [OTHER.id, THIRD.id]
    assert miss.nearest[0].differs == {"toolchain": ("2", "1")}
    assert never.nearest == () and never.built_elsewhere == 0
