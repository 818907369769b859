"""What a CUDA server reads by absolute path, driven on CPU with files shaped as torch and Triton write them:
built in one dir, published, the build dir removed, hydrated into another; the served process's own torch
code then finds every `.best_config` and Triton keeps every child path of its groups.

  * The static autotuners an FX-graph entry bundles are pickled with the kernel's `filename` (torch 2.11-2.14:
    codegen/triton.py passes `filename=__file__`, 2.14.1 :7391; `CachingAutotuner.__getstate__` keeps
    `__dict__`, 2.14.1 runtime/triton_heuristics.py:1200-1207) and an `AutotuneCache` whose local key is
    `dirname(filename)/<sha256>.best_config` (runtime/autotune_cache.py:130-137 and `_make_local_cache_key`).
    Here the pickled `AutotuneCache` is torch's own, made and read by torch's code (2.13 on this host).
  * Triton 3.6 writes `__grp__<name>.json` = {"child_paths": {file: absolute path}} (runtime/cache.py:91-95)
    and `get_group` keeps only the paths that exist (:73-88); `compile()` counts a hit only with the
    metadata path among them (compiler/compiler.py:262-266). Triton is not installed here (CPU torch), so
    the group's rule is applied as written there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cachekeeper.backends.inductor import InductorBackend
from cachekeeper.format import relocate
from cachekeeper.publish.upload import publish
from cachekeeper.stores.memory import MemoryStore
from tests.builders import fingerprint, spec
from tests.hydration.helpers import hydrate_into

pytest.importorskip("torch")

COMMON = r'''
import json, os, pickle, sys
from torch._inductor.runtime.autotune_cache import AutotuneCache

class Config:   # the attributes triton.Config has that the autotune cache reads (no triton on CPU torch)
    def __init__(self, kwargs, num_warps=4, num_stages=1):
        self.kwargs, self.num_warps, self.num_stages = kwargs, num_warps, num_stages
        self.num_ctas, self.maxnreg, self.pre_hook = 1, None, None

META = {"autotune_local_cache": True, "autotune_remote_cache": False, "is_hip": False, "backend_hash": "b" * 64}
CONFIGS = [Config({"XBLOCK": 64}), Config({"XBLOCK": 128}), Config({"XBLOCK": 256})]
HASH = "c" * 64
root = os.environ["TORCHINDUCTOR_CACHE_DIR"]
'''

WRITE = COMMON + r'''
autotuners = []
for i, shard in enumerate(("ab", "cd", "ef")):
    os.makedirs(f"{root}/{shard}", exist_ok=True)
    filename = f"{root}/{shard}/c{shard}kernel{i}.py"
    with open(filename, "w") as f:
        f.write("# a Triton kernel's module\n")
    cache = AutotuneCache.create(META, filename, HASH)
    cache.save(CONFIGS[i], 1_000_000)          # what autotuning at the build's first launch wrote
    autotuners.append(pickle.dumps({"filename": filename, "autotune_cache": cache, "kernel_name": f"k{i}"}))
kdir = f"{root}/triton/0/KHASH"
os.makedirs(kdir)
for name in ("k0.cubin", "k0.json", "k0.ptx"):
    with open(f"{kdir}/{name}", "w") as f:
        f.write(name)
with open(f"{kdir}/__grp__k0.json", "w") as f:
    json.dump({"child_paths": {n: f"{kdir}/{n}" for n in ("k0.cubin", "k0.json", "k0.ptx")}}, f)
os.makedirs(f"{root}/fxgraph/fk/fkey")
with open(f"{root}/fxgraph/fk/fkey/entry", "wb") as f:
    pickle.dump({"triton_bundle": autotuners, "runnable_graph_str": f"CACHE = {root!r}"}, f)
'''

READ = COMMON + r'''
def served(root):
    entry = pickle.load(open(f"{root}/fxgraph/fk/fkey/entry", "rb"))
    states = [pickle.loads(b) for b in entry["triton_bundle"]]
    # recheck_autotune_cache's lookup (a fresh AutotuneCache from the kernel's filename), and the pickled one's
    fresh = [AutotuneCache.create(META, s["filename"], HASH).read_best(META, CONFIGS) for s in states]
    pickled = [s["autotune_cache"].read_best(META, CONFIGS) for s in states]
    group = json.load(open(f"{root}/triton/0/KHASH/__grp__k0.json"))["child_paths"]
    return {"best_config_found": sum(b is not None for b in fresh),
            "pickled_found": sum(b is not None for b in pickled),
            "best": [b.kwargs["XBLOCK"] for b in fresh if b is not None], "kernels": len(states),
            "group_kept": sum(os.path.exists(p) for p in group.values()), "group": len(group)}

print(json.dumps([served(r) for r in sys.argv[1:]]))
'''


def run_python(code: str, cache: Path, *args: str) -> str:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TORCHINDUCTOR_")},
           "TORCHINDUCTOR_CACHE_DIR": str(cache)}
    proc = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_a_hydrated_dir_finds_every_best_config_and_triton_group_the_build_wrote(tmp_path: Path) -> None:
    backend = InductorBackend()
    roots = backend.build_roots(tmp_path / "ck-build-gpu")
    assert len(str(roots["cache"])) == relocate.RESERVED
    run_python(WRITE, roots["cache"])
    store = MemoryStore()
    # the same build published as before this change (nothing relocatable), then as now
    before, after = (publish(store, fingerprint=fingerprint(), spec=spec(model), roots={"cache": roots["cache"]},
                             include=backend.include, relocatable_roots=movable).manifest
                     for model, movable in (("before", frozenset()), ("after", backend.relocatable_roots)))
    assert not any(f.relocate for f in before.files)
    assert sorted(f.path for f in after.files if f.relocate) == ["fxgraph/fk/fkey/entry",
                                                                 "triton/0/KHASH/__grp__k0.json"]
    builder = os.fsencode(str(tmp_path / "ck-build-gpu"))
    shutil.rmtree(tmp_path / "ck-build-gpu")   # the build dir is gone
    dests = [tmp_path / "srv" / name / "fp" for name in ("before", "after")]
    for dest, manifest in zip(dests, (before, after), strict=True):
        hydrate_into(lambda: store, dest, [manifest.name])
    assert [p for p in dests[1].rglob("*") if p.is_file() and builder in p.read_bytes()] == []
    old, new = json.loads(run_python(READ, dests[1], *map(str, dests)).strip().splitlines()[-1])
    assert new == {"best_config_found": 3, "pickled_found": 3, "best": [64, 128, 256], "kernels": 3,
                   "group_kept": 3, "group": 3}
    # the measured problem (issue 39): served from another dir, the build's paths led nowhere
    assert old["best_config_found"] == old["pickled_found"] == old["group_kept"] == 0
