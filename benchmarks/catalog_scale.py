"""The inspection commands on a 100k-entry catalog, SQLite and Postgres: wall time (interpreter start
included) and peak RSS of `ls`, `ls --json`, `ls --model X`, `stats`, and `coverage` of a 1,000-entry
config, next to the bare interpreter start measured in the same run.

    python benchmarks/catalog_scale.py [--entries 100000] [--repeats 3] [--no-postgres]

Rows are bulk-inserted (the shapes `Catalog.record` writes, without building 100k manifests); the
1,000 entries of the config are real keys of the fake test backend's toolchain, so `coverage` finds
them. Postgres is a throwaway cluster (tests/harness/postgres.py), stopped at the end.
Targets (issue 10): each command under 1 s wall; `ls --json` in constant memory.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CONFIG = """version: 1
defaults:
  backends: [fake]
  modes: [full]
  dtypes: [float32]
  shapes: {{height: [{hs}], width: [{ws}], batch: [{bs}]}}
models:
  - name: flux
    path: {model}
    component: transformer
"""


def config_text(model: Path) -> str:
    ten = ", ".join(str(64 * (i + 1)) for i in range(10))
    return CONFIG.format(hs=ten, ws=ten, bs=", ".join(str(i + 1) for i in range(10)), model=model)


def installed_env() -> dict[str, str]:
    """The environment of the timed commands: bytecode cached, as in an installed package (pip compiles it at
    install). A checkout run with PYTHONDONTWRITEBYTECODE=1 would compile every module at every start.
    Compiled in place (`__pycache__/` is git-ignored), not under a PYTHONPYCACHEPREFIX: a prefix moves the
    lookup of every module's bytecode there, the stdlib's and botocore's too, and the first timed runs
    compiled those (0.6 s more for a hydrate's imports)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "cachekeeper"), str(REPO / "tests")],
                   env=env, check=True, stdout=subprocess.DEVNULL)
    return env


def fill(url: str, n: int, config: Path, env: dict[str, str]) -> None:
    """n manifest rows: the config's 1,000 entries for this host's fake toolchain, the rest synthetic."""
    os.environ.update(env)
    from sqlalchemy import insert

    from cachekeeper.catalog import Catalog
    from cachekeeper.catalog.models import FingerprintModel, ManifestModel
    from cachekeeper.config import load_config
    from cachekeeper.format.spec import EntrySpec, Shape
    from tests.fakes import FakeBackend

    fp = FakeBackend().fingerprint({})
    specs = [e.spec for e in load_config(str(config)).entries()]
    i = 0
    while len(specs) < n:
        specs.append(EntrySpec(model=f"model-{i % 97}", component="transformer", backend="fake", mode="full",
                               shape=Shape(64 + i % 512, 64, 1 + i // 512 % 8), dtype="bfloat16", revision="r1"))
        i += 1
    now = time.time()
    import datetime as dt

    at = dt.datetime.fromtimestamp(now, dt.UTC)
    with Catalog.open(url, auto_migrate=True) as catalog:
        engine = catalog._engine
        with engine.begin() as conn:
            conn.execute(insert(FingerprintModel), [{"id": fp.id, "backend": "fake", "fields": dict(fp.fields),
                                                     "first_seen": at}])
            batch: list[dict[str, Any]] = []
            for j, spec in enumerate(specs):
                digest = f"{j:064x}"
                batch.append({
                    "digest": digest, "key": f"manifests/{fp.id}/{spec.key}.json", "kind": "entry",
                    "name": spec.key, "fingerprint_id": fp.id, "entry_key": spec.key, "backend": "fake",
                    "model": spec.model, "component": spec.component, "mode": spec.mode,
                    "height": spec.shape.height, "width": spec.shape.width, "batch": spec.shape.batch,
                    "dtype": spec.dtype, "revision": spec.revision, "total_size": 1000 + j, "file_count": 12,
                    "blob_count": 2, "created_at": at, "store_url": "s3://bucket/ck", "spec": spec.to_dict(),
                    "build": {"host": "builder-1", "seconds": 12.5, "result": {"compiled": 1}},
                })
                if len(batch) == 5000:
                    conn.execute(insert(ManifestModel), batch)
                    batch = []
            if batch:
                conn.execute(insert(ManifestModel), batch)
        if engine.dialect.name == "postgresql":
            # Table statistics, as autovacuum gathers them on a live catalog: without them Postgres plans
            # 100k freshly loaded rows as if there were a few dozen. (SQLite gathers none by itself.)
            with engine.connect() as conn:
                conn.exec_driver_sql("ANALYZE")
                conn.commit()


def _fill_in_child(url: str, n: int, config: Path, env: dict[str, str]) -> None:
    subprocess.run([sys.executable, __file__, "--fill", url, str(config), str(n)], env=env, check=True)


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, int, float]:
    """(wall seconds, peak RSS MiB of the child, stdout lines, CPU seconds user+sys)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    lines = sum(1 for _ in proc.stdout)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}")
    return wall, usage.ru_maxrss / 1024, lines, usage.ru_utime + usage.ru_stime


def measure(label: str, url: str, env: dict[str, str], tmp: Path, config: Path, repeats: int) -> None:
    ck = [sys.executable, "-m", "cachekeeper"]
    runs = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "ls": [*ck, "ls", "--catalog", url],
        "ls --json": [*ck, "ls", "--json", "--catalog", url],
        "ls --model flux": [*ck, "ls", "--model", "flux", "--catalog", url],
        "stats": [*ck, "stats", "--catalog", url],
        "coverage (1,000 entries)": [*ck, "coverage", str(config), "--catalog", url],
    }
    print(f"\n{label}: {url.split('@')[-1]} (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    print(f"  {'command':<26} {'wall median':>11} {'min':>7} {'CPU median':>10} {'peak RSS':>9} {'lines':>8}")
    for name, argv in runs.items():
        results = [timed(argv, env, tmp) for _ in range(repeats)]
        walls = [r[0] for r in results]
        print(f"  {name:<26} {statistics.median(walls):10.3f}s {min(walls):6.3f}s "
              f"{statistics.median(r[3] for r in results):9.3f}s {max(r[1] for r in results):7.0f}MB "
              f"{results[0][2]:8d}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR and keep the SQLite catalog there (reused if present)")
    ap.add_argument("--fill", nargs=3, metavar=("URL", "CONFIG", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.fill:   # in a child: the timed children must not inherit a big parent's RSS
        url, cfg, n = args.fill
        fill(url, int(n), Path(cfg), dict(os.environ))
        return
    with tempfile.TemporaryDirectory(prefix="ck-bench-") as tmp_s:
        tmp = Path(args.keep or tmp_s)
        (tmp / "model").mkdir(parents=True, exist_ok=True)
        config = tmp / "ck.yaml"
        config.write_text(config_text(tmp / "model"))
        env = {**installed_env(), "CACHEKEEPER_BACKENDS": "fake=tests.fakes:FakeBackend",
               "PYTHONPATH": str(REPO), "CACHEKEEPER_HOME": str(tmp / "home")}
        sqlite_url = f"sqlite:///{tmp / 'catalog.db'}"
        if not (tmp / "catalog.db").exists():
            t0 = time.perf_counter()
            _fill_in_child(sqlite_url, args.entries, config, env)
            print(f"filled SQLite with {args.entries} entries in {time.perf_counter() - t0:.1f}s")
        measure("SQLite", sqlite_url, env, tmp, config, args.repeats)
        if not args.no_postgres:
            from tests.harness.postgres import running_postgres

            with running_postgres() as server:
                url = server.url()
                t0 = time.perf_counter()
                _fill_in_child(url, args.entries, config, env)
                print(f"\nfilled Postgres with {args.entries} entries in {time.perf_counter() - t0:.1f}s")
                measure("Postgres", url, env, tmp, config, args.repeats)

if __name__ == "__main__":
    main()
