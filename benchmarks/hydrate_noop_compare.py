"""No-op hydrate latency of this tree against another commit's, side by side in one run (ABBA order).

    python benchmarks/hydrate_noop_compare.py --base e9de0bc [--rounds 6]

Checks out `--base` into a temporary git worktree, runs both trees' `cachekeeper hydrate --json` on an
entry that is already in place (the fake test backend, no torch), alternating base, this, this, base per
round, and prints each median and the ratio. Both run as `python -S` with this venv's site-packages on
PYTHONPATH, so the editable install cannot import this tree in place of the base; the first lines print
the `cachekeeper` each side imported, so a run that compared a tree with itself shows it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the commit to compare with (e.g. the one before a change)")
    ap.add_argument("--rounds", type=int, default=6, help="ABBA rounds (each: base, this, this, base)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ck-bench-") as tmp_s:
        tmp = Path(tmp_s)
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(tmp / "base-tree"),
                        args.base], check=True)
        try:
            run_bench(tmp, args.rounds)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tmp / "base-tree")],
                           check=False)


def run_bench(tmp: Path, rounds: int) -> None:
    (tmp / "base-path").mkdir()
    (tmp / "base-path" / "cachekeeper").symlink_to(tmp / "base-tree" / "cachekeeper")
    (tmp / "model").mkdir()
    config = tmp / "ck.yaml"
    config.write_text(f"version: 1\ndefaults:\n  backends: [fake]\n  shapes: ['64x64x1']\n"
                      f"models:\n  - name: tiny\n    path: {tmp / 'model'}\n")
    site = sysconfig.get_paths()["purelib"]
    # As installed packages run: with their bytecode cached (a PYTHONDONTWRITEBYTECODE shell would time the
    # compile of every module instead, and make the longer tree look slower than it runs).
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEKEEPER_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(CACHEKEEPER_HOME=str(tmp / "home"), CACHEKEEPER_BACKENDS="fake=tests.fakes:FakeBackend")
    trees = {"base": tmp / "base-path", "this": REPO}

    def run(tree: str, *argv: str) -> subprocess.CompletedProcess[str]:
        # the base tree first; REPO after it only for tests.fakes (the fake backend)
        path = f"{trees[tree]}:{REPO}:{site}"
        return subprocess.run([sys.executable, "-S", *argv], env={**env, "PYTHONPATH": path}, cwd=tmp,
                              capture_output=True, text=True, check=True)

    for tree in trees:
        print(tree, "imports", run(tree, "-c", "import cachekeeper; print(cachekeeper.__file__)").stdout.strip())
        run(tree, "-m", "cachekeeper", "prebuild", str(config))
        run(tree, "-m", "cachekeeper", "hydrate", "--config", str(config), "--dest", str(tmp / f"dest-{tree}"))
    times: dict[str, list[float]] = {tree: [] for tree in trees}
    for tree in ["base", "this", "this", "base"] * rounds:
        t0 = time.perf_counter()
        proc = run(tree, "-m", "cachekeeper", "hydrate", "--config", str(config), "--dest", str(tmp / f"dest-{tree}"),
                   "--json")
        times[tree].append(time.perf_counter() - t0)
        if '"noop": true' not in proc.stdout:
            raise SystemExit(f"{tree}: the hydrate was not a no-op: {proc.stdout[:200]}")
    for tree, values in times.items():
        print(f"{tree:5} no-op hydrate  median {statistics.median(values):.3f}s  min {min(values):.3f}s  "
              f"n={len(values)}")
    print(f"ratio this / base (medians): {statistics.median(times['this']) / statistics.median(times['base']):.3f}")


if __name__ == "__main__":
    main()
