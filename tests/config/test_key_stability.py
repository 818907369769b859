"""Entry keys name artifacts in the store: they must not depend on the process, the host path or the layout.

Also: the module stays importable without heavy dependencies (the hydrate boot path)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cachekeeper.config import load_config, parse_config

from .util import EXAMPLE, parse

REPO_ROOT = Path(__file__).resolve().parents[2]
KEYS_SCRIPT = ("import sys; from cachekeeper.config import load_config; "
               "print(' '.join(e.spec.key for e in load_config(sys.argv[1]).entries()))")


def keys_in_subprocess(config_file: Path, hash_seed: str) -> list[str]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", KEYS_SCRIPT, str(config_file)], env=env, cwd=config_file.parent,
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.split()


def test_two_parses_give_the_same_keys_in_the_same_order() -> None:
    assert [e.spec.key for e in parse(EXAMPLE).entries()] == [e.spec.key for e in parse(EXAMPLE).entries()]


@pytest.mark.parametrize("hash_seed", ["0", "4242"])
def test_other_processes_compute_the_same_keys_in_the_same_order(tmp_path: Path, hash_seed: str) -> None:
    config_file = tmp_path / "ck.yaml"
    config_file.write_text(EXAMPLE, encoding="utf-8")
    here = [e.spec.key for e in load_config(config_file).entries()]
    assert keys_in_subprocess(config_file, hash_seed) == here
    assert len(here) == 10


def test_keys_do_not_depend_on_where_the_config_lives() -> None:
    a = parse_config(EXAMPLE, "a.yaml", base_dir="/one")
    b = parse_config(EXAMPLE, "b.yaml", base_dir="/two/three")
    assert a.models[0].model.path != b.models[0].model.path
    assert [e.spec.key for e in a.entries()] == [e.spec.key for e in b.entries()]


def test_keys_do_not_depend_on_how_the_matrix_is_written() -> None:
    block = parse("""\
        version: 1
        models:
          - name: m
            path: ./m
            backends: [neuron, inductor]
            dtypes: [float32, bfloat16]
            shapes: {height: [128, 64], width: 64}
    """)
    flow = parse("""\
        version: 1
        defaults: {dtypes: [bfloat16, float32], shapes: ['64x64x1', {height: 128, width: 64}]}
        models: [{shapes: ['128x64', '64x64'], path: /elsewhere/m, backends: [inductor, neuron], name: m}]
    """)
    assert [e.spec.key for e in block.entries()] == [e.spec.key for e in flow.entries()]
    assert len(block.entries()) == 8


def test_keys_change_with_every_matrix_dimension() -> None:
    base = parse(EXAMPLE).entries()[0].spec
    variants = [
        "  - name: tiny-flux2\n    path: ./m\n",
        "  - name: tiny-flux\n    path: ./m\n    component: unet\n",
        "  - name: tiny-flux\n    path: ./m\n    revision: v2\n",
        "  - name: tiny-flux\n    path: ./m\n    modes: [repeated_blocks]\n",
        "  - name: tiny-flux\n    path: ./m\n    dtypes: [bfloat16]\n",
        "  - name: tiny-flux\n    path: ./m\n    shapes: ['64x72']\n",
        "  - name: tiny-flux\n    path: ./m\n    tensor_parallel: 2\n",
        "  - name: tiny-flux\n    path: ./m\n    guidance: true\n",
    ]
    head = EXAMPLE[: EXAMPLE.index("models:\n") + len("models:\n")]
    keys = {base.key} | {parse(head + v).entries()[0].spec.key for v in variants}
    assert len(keys) == 1 + len(variants)


def test_importing_the_config_loads_neither_torch_nor_sqlalchemy() -> None:
    """The hydrate boot path imports this module on hosts where those are absent or slow to import."""
    script = ("import sys, cachekeeper.config; "
              "print(' '.join(m for m in sys.modules if m.split('.')[0] in ('torch', 'sqlalchemy', 'diffusers')))")
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                          capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == []


def test_a_spec_computes_its_key_once_and_the_cached_key_is_no_part_of_the_spec(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from cachekeeper.format import canonical, spec

    calls: list[object] = []
    digest = canonical.digest
    monkeypatch.setattr(spec.canonical, "digest", lambda value: calls.append(value) or digest(value))
    entry = spec.EntrySpec("m", "transformer", "inductor", "full", spec.Shape(64, 64, 1), "float32")
    assert entry.key == entry.key == entry.key and len(calls) == 1
    assert "key" not in entry.to_dict() and entry == spec.EntrySpec.from_dict(entry.to_dict())
