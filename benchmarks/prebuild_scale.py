"""Prebuild fan-out on one host with a simulated compile (benchmarks/sim_backend.py: sleeps, or burns CPU,
then writes files): 1, 2, 4 and 8 worker processes on one queue, on SQLite and on Postgres, side by side;
the per-job overhead of the worker (claim, publish, record: wall per entry minus its build); and the
planning of a 10,000-entry matrix.

    python benchmarks/prebuild_scale.py [--entries 24] [--seconds 1] [--mode sleep|cpu] [--no-postgres]

Targets (issue 10): speedup >= 0.8 x N for sleep-bound builds; overhead p50 < 50 ms; planning < 2 s.
A CPU-bound build cannot speed up past the host's cores (2 on CI): `--mode cpu` shows that ceiling.

Start-up is measured apart and shown next to the speedup. A worker process costs ~0.6 s of CPU to start
(interpreter, SQLAlchemy, config, plan) and exit, and N workers started at once on this host share its
cores: 8 of them on 2 cores start in ~4x the wall of one, where a fleet starts each on its own machine
in parallel. `start-up N` is the wall of N workers that find everything built (start, plan, exit) run
at once; `fleet speedup` replaces that N-way start-up with one worker's, T1 / (TN - startN + start1):
what N machines would see. Both figures are printed; the target is read against the fleet one.
Children run with cached bytecode, as from an installed package (see catalog_scale.installed_env).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.catalog_scale import installed_env  # noqa: E402  (needs REPO on the path)

ENABLE = {"CACHEKEEPER_BACKENDS": "sim=benchmarks.sim_backend:SimBackend", "PYTHONPATH": str(REPO)}


def config_text(model: Path, heights: int, widths: int = 1, batches: int = 1) -> str:
    hs = ", ".join(str(64 * (i + 1)) for i in range(heights))
    ws = ", ".join(str(64 * (i + 1)) for i in range(widths))
    bs = ", ".join(str(i + 1) for i in range(batches))
    return (f"version: 1\ndefaults:\n  backends: [sim]\n  modes: [full]\n  dtypes: [bfloat16]\n"
            f"  shapes: {{height: [{hs}], width: [{ws}], batch: [{bs}]}}\n"
            f"models:\n  - name: flux\n    path: {model}\n    component: transformer\n")


def fan_out(workers: int, config: Path, catalog: str, store: Path, env: dict[str, str], tmp: Path) -> float:
    """Wall seconds for `workers` prebuild processes to build the whole matrix together (or, run again on a
    built matrix, to start, find everything built and exit)."""
    argv = [sys.executable, "-m", "cachekeeper", "prebuild", str(config), "--catalog", catalog,
            "--store", f"file://{store}", "--wait", "--heartbeat", "2", "--lease", "10"]
    t0 = time.perf_counter()
    procs = [subprocess.Popen([*argv, "--worker", f"w{i}"], env=env, cwd=tmp, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE) for i in range(workers)]
    for p in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"worker exited {p.returncode}: {err.decode()[-2000:]}")
    return time.perf_counter() - t0


def overhead_ms(config: Path, catalog_url: str, store: Path, n: int) -> list[float]:
    """Per entry: wall between consecutive outcomes minus the build's own seconds (in-process worker)."""
    os.environ.update({**ENABLE, "SIM_SECONDS": "0"})
    from cachekeeper.catalog import Catalog
    from cachekeeper.config import load_config
    from cachekeeper.stores import open_store
    from cachekeeper.worker.prebuild import Outcome, RunSettings, prebuild

    stamps: list[tuple[float, Outcome]] = []
    with Catalog.open(catalog_url, auto_migrate=True) as catalog:
        t0 = time.perf_counter()
        prebuild(load_config(str(config)), open_store(f"file://{store}", create=True), catalog=catalog,
                 settings=RunSettings(), progress=lambda o: stamps.append((time.perf_counter(), o)))
    out, last = [], t0
    for at, o in stamps[1:]:   # the first one carries the planning
        out.append((at - last - o.seconds) * 1000)
        last = at
    assert len(stamps) == n, (len(stamps), n)
    return out


def planning_seconds(tmp: Path, catalog_url: str) -> tuple[int, float, dict[str, float]]:
    """Load a 10,000-entry config, fingerprint, check the catalog, queue it: what a worker does first."""
    os.environ.update(ENABLE)
    from cachekeeper.catalog import Catalog
    from cachekeeper.config import load_config
    from cachekeeper.stores import open_store
    from cachekeeper.worker import payload
    from cachekeeper.worker.prebuild import split_built, toolchains

    config = tmp / "big.yaml"
    config.write_text(config_text(tmp / "model", 25, 20, 20))
    steps: dict[str, float] = {}

    def step(name: str, fn: Callable[[], object]) -> object:
        t = time.perf_counter()
        value = fn()
        steps[name] = time.perf_counter() - t
        return value

    with Catalog.open(catalog_url, auto_migrate=True) as catalog:
        t0 = time.perf_counter()
        cfg = load_config(str(config))
        entries = cfg.entries()
        tcs = toolchains(cfg, entries)
        store = open_store(f"file://{tmp / 'plan-store'}", create=True)
        split = step("catalog lookup", lambda: split_built(entries, tcs, store, catalog))
        todo = split[0]  # type: ignore[index]
        jobs = [(tcs[e.spec.backend].fingerprint.id, e.spec.key, payload.encode(e)) for e in todo]
        step("enqueue", lambda: catalog.enqueue(jobs))
        step("requeue", lambda: catalog.requeue((fp, key) for fp, key, _ in jobs))
        return len(entries), time.perf_counter() - t0, steps


def run_db(label: str, url_for: Callable[[str], str], args: argparse.Namespace, tmp: Path) -> None:
    model = tmp / "model"
    config = tmp / "ck.yaml"
    config.write_text(config_text(model, args.entries))
    env = {**installed_env(), **ENABLE, "SIM_SECONDS": str(args.seconds), "SIM_MODE": args.mode,
           "CACHEKEEPER_HOME": str(tmp / "home")}
    print(f"\n{label}: {args.entries} entries of {args.seconds:g} s ({args.mode}-bound), 20 files of 64 KiB each")
    print(f"  {'workers':>7} {'wall':>8} {'speedup':>8} {'start-up':>9} {'fleet speedup':>14} {'target':>7} "
          f"{'load':>5}")
    base = start1 = 0.0
    for n in (1, 2, 4, 8):
        url = url_for(f"fan{n}")
        subprocess.run([sys.executable, "-m", "cachekeeper", "db", "upgrade", "--catalog", url], env=env, check=True,
                       capture_output=True)
        load = os.getloadavg()[0]
        wall = fan_out(n, config, url, tmp / f"store-{label}-{n}", env, tmp)
        start = fan_out(n, config, url, tmp / f"store-{label}-{n}", env, tmp)   # all built now: start and exit
        base, start1 = base or wall, start1 or start
        fleet = base / max(wall - start + start1, 1e-9)
        print(f"  {n:>7} {wall:7.2f}s {base / wall:7.2f}x {start:8.2f}s {fleet:13.2f}x {0.8 * n:6.1f}x {load:5.1f}")
    ms = overhead_ms(config, url_for("overhead"), tmp / f"store-{label}-overhead", args.entries)
    print(f"  per-job overhead (claim + publish + record; wall per entry minus its build), "
          f"{len(ms)} entries: p50 {statistics.median(ms):.1f} ms, p90 {sorted(ms)[int(len(ms) * 0.9)]:.1f} ms")
    n, seconds, steps = planning_seconds(tmp, url_for("plan"))
    print(f"  planning a {n}-entry matrix: {seconds:.2f} s (" + ", ".join(f"{k} {v:.2f}s" for k, v in steps.items())
          + ")")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=24)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--mode", choices=("sleep", "cpu"), default="sleep")
    ap.add_argument("--no-postgres", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ck-bench-") as tmp_s:
        tmp = Path(tmp_s)
        (tmp / "model").mkdir()
        run_db("SQLite", lambda name: f"sqlite:///{tmp / name}.db", args, tmp)
        if args.no_postgres:
            return
        import psycopg

        from tests.harness.postgres import running_postgres

        with running_postgres() as server:

            def url_for(name: str) -> str:
                with psycopg.connect(server.dsn(), autocommit=True) as admin:
                    admin.execute(f'CREATE DATABASE "{name}"')
                return server.url(name)

            run_db("Postgres", url_for, args, tmp)

if __name__ == "__main__":
    main()
