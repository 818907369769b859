"""Publish throughput against a local SeaweedFS, side by side with `aws s3 sync` uploading the same tree.

    python benchmarks/publish_throughput.py [--repeats 3] [--scale 1.0] [--only small|large]

Data (as in hydrate_throughput.py): (a) 2,000 files of 64-512 KiB in the TorchNeuron layout (~562 MiB);
(b) 4 x 256 MiB. Each repeat publishes into a fresh prefix (nothing is present yet) with
`cachekeeper.publish.upload.publish` (plan: hash, pack, one batch existence check; execute: parallel uploads
under a bytes-in-flight bound) and runs `aws s3 sync` of the tree into another fresh prefix, alternating
which goes first. Prints medians (wall, MiB/s, CPU seconds, peak RSS) and the ratio publish / sync.
"""

from __future__ import annotations

import argparse
import functools
import random
import shutil
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
MiB = 1 << 20

PUBLISH = """
import sys
from pathlib import Path
from cachekeeper.publish.upload import publish
from cachekeeper.stores import open_store
from tests.builders import fingerprint, spec
publish(open_store(sys.argv[1]), fingerprint=fingerprint(), spec=spec(), roots={"cache": Path(sys.argv[2])},
        include=lambda r, p, f: True)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0, help="shrink both data sets (e.g. 0.25 on a busy host)")
    ap.add_argument("--only", choices=["small", "large"])
    args = ap.parse_args()

    from benchmarks.hydrate_throughput import large_tree, neuron_tree, run, seaweed_session

    aws = shutil.which("aws")
    if aws is None:
        raise SystemExit("the AWS CLI (`aws`) is needed for the comparison")
    with seaweed_session("ck-pub-") as (tmp, server, env):
        server.client.create_bucket(Bucket="bench")
        rng = random.Random(8)
        n = max(10, int(2000 * args.scale))
        size = max(16 * MiB, int(256 * MiB * args.scale) // (16 * MiB) * 16 * MiB)
        datasets: list[tuple[str, Callable[[Path], int]]] = []
        if args.only in (None, "small"):
            datasets.append((f"{n} files of 64-512 KiB", functools.partial(neuron_tree, n=n, rng=rng)))
        if args.only in (None, "large"):
            datasets.append((f"4 x {size // MiB} MiB", functools.partial(large_tree, n=4, size=size)))
        for label, make in datasets:
            root = tmp / "tree"
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir()
            total = make(root)
            results: dict[str, list[tuple[float, float, float]]] = {"publish": [], "aws s3 sync": []}
            for rep in range(args.repeats):
                runs = {
                    "publish": [sys.executable, "-c", PUBLISH, f"s3://bench/pub-{rep}", str(root)],
                    "aws s3 sync": [aws, "s3", "sync", "--only-show-errors", str(root), f"s3://bench/sync-{rep}/"],
                }
                order = list(runs) if rep % 2 == 0 else list(reversed(runs))
                for name in order:
                    results[name].append(run(runs[name], env, tmp))
            print(f"\n{label} ({total / MiB:.0f} MiB), median of {args.repeats}:")
            walls = {}
            for name, rs in results.items():
                wall = statistics.median(r[0] for r in rs)
                walls[name] = wall
                print(f"  {name:<12} {wall:7.2f} s {total / MiB / wall:8.1f} MiB/s  "
                      f"CPU {statistics.median(r[2] for r in rs):6.2f} s  RSS {max(r[1] for r in rs):6.0f} MiB")
            print(f"  publish / aws s3 sync throughput: {walls['aws s3 sync'] / walls['publish']:.2f}x")


if __name__ == "__main__":
    main()
