"""Inspection at scale: a 100k-entry catalog on SQLite and on Postgres, measured side by side.

    python benchmarks/inspect_scale.py [--fingerprints 10] [--models 64] [--repeats 3] [--no-postgres]

Times (median of --repeats, after one cold run that is reported apart): the dashboard's first view (`GET /`,
the fullest toolchain's matrix page, queue and publishes), a filtered view (`status=missing`), `diff` of two
toolchains (both anti-joins + the plan) and `explain`'s lookup of one entry's holders. Target (issue 11):
the first view under 1 s. Postgres is started from the test harness (Postgres 15 binaries needed).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, insert
from starlette.testclient import TestClient

from cachekeeper.catalog import Catalog, views
from cachekeeper.catalog.db import parse_url
from cachekeeper.catalog.models import BuildJobModel, FingerprintModel, ManifestModel
from cachekeeper.dashboard.app import create_app
from cachekeeper.format.fingerprint import Fingerprint
from cachekeeper.inspection.diff import plan_diff

REPO = Path(__file__).resolve().parents[1]

SHAPES = [(h, w) for h in (256, 512, 768, 1024, 1280) for w in (256, 512, 768, 1024)]   # 20
MODES = ("full", "repeated_blocks")
DTYPES = ("float32", "bfloat16", "float16", "float8", "int8")


def fingerprints(n: int) -> list[Fingerprint]:
    return [Fingerprint.of("inductor", {"torch": f"2.{13 + i // 3}.0", "cpu_isa": ("avx2", "avx512")[i % 2],
                                        "omp_threads": str(8 + i % 3)}) for i in range(n)]


def rows(fps: list[Fingerprint], models: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    at = datetime.now(UTC)
    fp_rows = [{"id": fp.id, "backend": fp.backend, "fields": dict(fp.fields), "first_seen": at} for fp in fps]
    out = []
    for i, fp in enumerate(fps):
        n = 0
        for m in range(models):
            for (h, w) in SHAPES:
                for mode in MODES:
                    for dtype in DTYPES:
                        n += 1
                        key = hashlib.sha256(f"{m}{h}{w}{mode}{dtype}".encode()).hexdigest()[:32]
                        if i and int(key[:2], 16) % len(fps) < i // 2:
                            continue            # later toolchains lack a growing share: missing cells, diffs
                        out.append({
                            "digest": hashlib.sha256(f"{fp.id}{key}".encode()).hexdigest(),
                            "key": f"manifests/{fp.id}/{key}.json", "kind": "entry", "name": key,
                            "fingerprint_id": fp.id, "entry_key": key, "backend": "inductor",
                            "model": f"model-{m:03d}", "component": "transformer", "mode": mode, "height": h,
                            "width": w, "batch": 1, "dtype": dtype, "revision": "r1",
                            "total_size": 1_000_000 + n * 37, "file_count": 90, "blob_count": 3,
                            "created_at": at - timedelta(seconds=n), "store_url": "s3://bucket/ck",
                            "spec": None, "build": {"host": "builder", "seconds": 30.0 + n % 60}})
    return fp_rows, out


def populate(url: str, fps: list[Fingerprint], models: int) -> int:
    with Catalog.open(url, auto_migrate=True):
        pass
    fp_rows, entry_rows = rows(fps, models)
    names = list(dict.fromkeys(r["name"] for r in entry_rows))[:2000]
    jobs = [{"fingerprint_id": fps[-1].id, "entry_key": name, "spec": "{}", "status": "pending",
             "attempts": 0, "updated_at": datetime.now(UTC)} for name in names]
    engine = create_engine(parse_url(url))
    with engine.begin() as conn:
        conn.execute(insert(FingerprintModel), fp_rows)
        for i in range(0, len(entry_rows), 5000):
            conn.execute(insert(ManifestModel), entry_rows[i:i + 5000])
        conn.execute(insert(BuildJobModel), jobs)
        if conn.dialect.name == "postgresql":
            conn.exec_driver_sql("ANALYZE")
    engine.dispose()
    return len(entry_rows)


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, float, float]:
    """(cold wall, median warm wall, median warm CPU of this process). On SQLite every query runs in this
    process, so its CPU time is what an idle machine's wall time would be; on Postgres it leaves out the
    server's share."""
    wall, cpu = [], []
    for _ in range(repeats + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return wall[0], statistics.median(wall[1:]), statistics.median(cpu[1:])


def measure(url: str, fps: list[Fingerprint], repeats: int) -> dict[str, tuple[float, float, float]]:
    a, b = fps[0], fps[-1]
    with Catalog.open(url, auto_migrate=False) as catalog, TestClient(create_app(catalog)) as client:
        def page(q: str) -> Callable[[], object]:
            def get() -> object:
                r = client.get(q)
                assert r.status_code == 200, r.text[:300]
                return r
            return get

        def diff() -> object:
            with views.reading(catalog) as conn:
                return plan_diff(a, b, views.entries_only_in(conn, a.id, b.id), views.entries_only_in(conn, b.id, a.id),
                                 workers=8)

        def explain() -> object:
            with views.reading(catalog) as conn:
                return views.holders(conn, hashlib.sha256(b"7512512fullfloat32").hexdigest()[:32])

        return {"first view (GET /)": timed(page("/"), repeats),
                "filtered view (missing)": timed(page(f"/?fp={b.id}&status=missing&page=3"), repeats),
                "diff A B (both sides)": timed(diff, repeats),
                "explain lookup": timed(explain, repeats)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fingerprints", type=int, default=10)
    ap.add_argument("--models", type=int, default=64)   # 64 models x 200 cells x 10 toolchains, some missing: ~100k
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-postgres", action="store_true")
    args = ap.parse_args()
    fps = fingerprints(args.fingerprints)
    tmp = Path(tempfile.mkdtemp(prefix="ck-bench-inspect-"))
    results: dict[str, dict[str, tuple[float, float, float]]] = {}
    sys.path.insert(0, str(REPO))           # the test harness starts and stops the throwaway cluster
    from tests.harness.postgres import running_postgres

    with contextlib.ExitStack() as stack:
        urls = {"sqlite": f"sqlite:///{tmp / 'catalog.db'}"}
        if not args.no_postgres:
            urls["postgres"] = stack.enter_context(running_postgres()).url()
        stack.callback(shutil.rmtree, tmp, ignore_errors=True)
        for name, url in urls.items():
            t0 = time.perf_counter()
            count = populate(url, fps, args.models)
            print(f"{name}: {count} entries over {len(fps)} toolchains loaded in {time.perf_counter() - t0:.1f}s",
                  file=sys.stderr)
            results[name] = measure(url, fps, args.repeats)
    names = list(results)
    print(f"{'measure':<26}" + "".join(f"{n + ' cold':>14}{n + ' warm':>14}{n + ' cpu':>13}" for n in names)
          + ("   postgres/sqlite (warm)" if len(names) == 2 else ""))
    for what in results[names[0]]:
        line = f"{what:<26}" + "".join(f"{results[n][what][0]:>13.3f}s{results[n][what][1]:>13.3f}s"
                                       f"{results[n][what][2]:>12.3f}s" for n in names)
        if len(names) == 2:
            line += f"   {results['postgres'][what][1] / results['sqlite'][what][1]:>10.2f}x"
        print(line)
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (wall figures scale "
          "with it; cpu = this process only)")
    for n in names:
        cold, warm, cpu = results[n]["first view (GET /)"]
        print(f"{n}: first view {cold:.3f}s cold, {warm:.3f}s warm ({cpu:.3f}s CPU here) = "
              f"{warm / 1.0:.2f}x the 1 s target")

if __name__ == "__main__":
    main()
