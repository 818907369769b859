"""No-op hydrate latency: wall time of `cachekeeper hydrate` when everything is already in place,
interpreter start included, against the bare interpreter start measured in the same run.

    python benchmarks/hydrate_noop.py [--files 2000] [--repeats 7]

Builds a store with the fake test backend (no torch), hydrates once, then times repeat runs.
Target (issue 2): under 0.5 s wall.
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

REPO = Path(__file__).resolve().parents[1]


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=2000, help="small files per entry (a Neuron eager cache)")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ck-bench-") as tmp_s:
        tmp = Path(tmp_s)
        (tmp / "model").mkdir()
        config = tmp / "ck.yaml"
        config.write_text(f"version: 1\ndefaults:\n  backends: [fake]\n  shapes: ['64x64x1']\n"
                          f"models:\n  - name: tiny\n    path: {tmp / 'model'}\n")
        env = {**os.environ, "CACHEKEEPER_BACKENDS": "fake=tests.fakes:FakeBackend", "PYTHONPATH": str(REPO),
               "CACHEKEEPER_HOME": str(tmp / "home"), "FAKE_SHARED_DIR": str(tmp / "shared"),
               "FAKE_SMALL_FILES": str(args.files)}
        ck = [sys.executable, "-m", "cachekeeper"]
        subprocess.run([*ck, "prebuild", str(config), "--no-catalog"], env=env, cwd=tmp, check=True,
                       capture_output=True)
        hydrate = [*ck, "hydrate", "--config", str(config), "--dest", str(tmp / "dest")]
        first = timed(hydrate, env, tmp)
        noop = [timed(hydrate, env, tmp) for _ in range(args.repeats)]
        bare = [timed([sys.executable, "-c", "pass"], env, tmp) for _ in range(args.repeats)]
        n = args.files + 4
        print(f"entry of {n} files: first hydrate {first:.3f}s")
        print(f"no-op hydrate   median {statistics.median(noop):.3f}s  (min {min(noop):.3f}s)  target < 0.5s")
        print(f"bare python -c  median {statistics.median(bare):.3f}s")
        print(f"ratio no-op / bare interpreter: {statistics.median(noop) / statistics.median(bare):.1f}x")


if __name__ == "__main__":
    main()
