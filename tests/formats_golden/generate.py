"""Write the public formats of a few configs into a folder: entry keys, published manifests, the lockfile.

tests/test_formats_stable.py runs this with the current code and compares the bytes with the goldens in
tests/formats_golden/<config>/, which this same script wrote from the commit before the layer folders
(e9de0bc). Regenerate them only for an intended format change:

    git worktree add --detach /tmp/golden e9de0bc
    mkdir /tmp/golden-path && ln -s /tmp/golden/cachekeeper /tmp/golden-path/
    cd /tmp/golden-path && PYTHONPATH=/tmp/golden-path:$REPO $REPO/.venv/bin/python -m tests.formats_golden.generate \
        $REPO/tests/formats_golden       # run from there: `-m` puts the working dir first on the path

(it prints the cachekeeper it imported: check it is the one under /tmp/golden-path).

Inputs are fixed so the output is the same on every host and run: the toolchain probes the inductor
fingerprint reads (torch, python, compiler, CPU) are pinned, the built files are derived from the entry
key, and a manifest's informative `build` field is a constant. One field is normalised: the lockfile's
`store` (the URL of a temporary directory) reads `file:///STORE`.

Only names that the pre-refactor tree also has are used: the config loader, the backend registry, the
inductor probes, the publisher (found at either of its homes) and the `lock` command.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from unittest import mock

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# The configs whose formats are pinned: the examples, and one matrix with more of the key's fields.
CONFIGS = {"tiny": REPO / "examples" / "tiny.yaml", "pipelines": REPO / "examples" / "pipelines.yaml",
           "matrix": HERE / "matrix.yaml"}
STORE_MARK = "file:///STORE"
BACKEND = "inductor"

# What the inductor fingerprint reads from the host, pinned (module, name, value).
PROBES: list[tuple[str, str, Any]] = [
    ("cachekeeper.backends.toolchain", "dist_version", lambda name: {"torch": "2.13.0"}.get(name)),
    ("cachekeeper.backends.inductor.backend", "dist_version", lambda name: {"torch": "2.13.0"}.get(name)),
    ("cachekeeper.backends.inductor.probes", "torch_origin", lambda: "/opt/venv/lib/python3.11/site-packages/torch"),
    ("cachekeeper.backends.inductor.probes", "python_version", lambda: "3.11.9"),
    ("cachekeeper.backends.inductor.probes", "cpu_isa", lambda env: "avx2"),
    ("cachekeeper.backends.inductor.probes", "omp_threads", lambda env: "8"),
    ("cachekeeper.backends.inductor.probes", "cxx_path", lambda env: "/usr/bin/g++"),
    ("cachekeeper.backends.inductor.probes", "cxx_identity", lambda path: "g++ (Debian 12.2.0-14) 12.2.0"),
    ("cachekeeper.backends.inductor.probes", "output_env", lambda env: {}),
]


@contextlib.contextmanager
def pinned_host() -> Iterator[None]:
    """This host as a fixed one: the probes above, and no CACHEKEEPER_* setting of the caller's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEKEEPER_")}
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.dict(os.environ, env, clear=True))
        for module, name, value in PROBES:
            stack.enter_context(mock.patch.object(importlib.import_module(module), name, value))
        yield


def _publisher() -> Callable[..., Any]:
    """`publish`: publish/upload.py since the layer folders, publish.py at the package root before."""
    for module in ("cachekeeper.publish.upload", "cachekeeper.publish"):
        with contextlib.suppress(ImportError):
            fn: Callable[..., Any] = importlib.import_module(module).publish
            return fn
    raise ImportError("no cachekeeper publisher found")


def _build(workdir: Path, key: str, *, large: bool) -> dict[str, Path]:
    """The files a build of entry `key` leaves: small ones (packed), one large (a blob of its own, first
    entry only), one the backend's `include` leaves out, and a toolchain-shared header."""
    cache, pch = workdir / "cache", workdir / "pch"
    for i in range(3):
        path = cache / f"{i:02d}" / f"graph{i}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"{key}:{i}".encode() * (i + 1))
    (cache / "busy.lock").write_bytes(b"")
    if large:
        (cache / "large.bin").write_bytes(key.encode() * ((4 << 20) // len(key) + 1))
    pch.mkdir(parents=True, exist_ok=True)
    (pch / "header.h").write_bytes(b"#include <torch/extension.h>\n")
    (pch / "header.h.gch").write_bytes(b"precompiled header")
    return {"cache": cache, "pch": pch}


def _lock(config: Path, store_url: str, out: Path) -> None:
    from click.testing import CliRunner

    import cachekeeper.cli as cli

    cli._register()   # the commands are added on first run
    result = CliRunner().invoke(cli.cli, ["lock", "--config", str(config), "--backend", BACKEND,
                                          "--store", store_url, "-o", str(out)])
    if result.exit_code != 0:
        raise RuntimeError(f"lock {config}: exit {result.exit_code}: {result.output}")
    out.write_text(out.read_text().replace(json.dumps(store_url), json.dumps(STORE_MARK)))


def generate_one(name: str, config_path: Path, out: Path, work: Path) -> None:
    from cachekeeper.backends import get_backend
    from cachekeeper.config import load_config
    from cachekeeper.stores.file import FileStore

    config = load_config(config_path)
    entries = config.entries()
    keys = [{"key": e.spec.key, "label": e.spec.label(), "spec": e.spec.to_dict()} for e in entries]
    (out / name).mkdir(parents=True, exist_ok=True)
    (out / name / "keys.json").write_text(json.dumps(keys, indent=1, sort_keys=True) + "\n")
    backend = get_backend(BACKEND)
    fingerprint = backend.fingerprint(config.backend_options_for(BACKEND))
    store = FileStore(work / "store")
    publish = _publisher()
    for i, entry in enumerate(e for e in entries if e.spec.backend == BACKEND):
        roots = _build(work / "build" / entry.spec.key, entry.spec.key, large=i == 0)
        publish(store, fingerprint=fingerprint, spec=entry.spec, roots=roots, include=backend.include,
                shared_roots=backend.shared_roots, build={"golden": "fixed"})
    shutil.copytree(work / "store" / "manifests", out / name / "manifests")
    _lock(config_path, store.url, out / name / "lock.json")


def generate(out: Path) -> list[Path]:
    """Every golden file, written under `out`; returns them (relative to `out`), sorted."""
    with pinned_host():
        for name, config in CONFIGS.items():
            with tempfile.TemporaryDirectory(prefix=f"ck-golden-{name}-") as work:
                generate_one(name, config, out, Path(work))
    return sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file() and p.suffix == ".json")


if __name__ == "__main__":
    import cachekeeper

    print(f"generating from {Path(cachekeeper.__file__).parent}", file=sys.stderr)
    target = Path(sys.argv[1])
    for name in CONFIGS:
        shutil.rmtree(target / name, ignore_errors=True)
    print(f"{len(generate(target))} files", file=sys.stderr)
