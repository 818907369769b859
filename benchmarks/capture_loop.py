"""What the capture loop saves, side by side in one run: the first call of a shape nobody prebuilt.

  runtime   a host hydrated with the config's shape A serves shape B: Inductor compiles B at runtime
            (what every new host paid before capture)
  captured  a fresh host hydrates after an earlier host ran `capture --publish`: B comes from the
            captured set

Also timed: `capture --publish` on the runtime host (what a shutdown hook or sidecar round costs) and
the hydrate of the captured host. Each host is a fresh TMPDIR and working dir; each serve is a new
process (examples/serve.py); rounds interleave the two so background load hits both alike. Medians.
Not a test: a runtime compile takes a minute on a CPU.

    python benchmarks/capture_loop.py                    # tiny Flux transformer, CPU, A=64x64, B=64x128
    python benchmarks/capture_loop.py --repeats 3 --json results.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SERVE = REPO / "examples" / "serve.py"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--repeats", type=int, default=2, help="rounds (median reported; default 2)")
    ap.add_argument("--height", type=int, default=64, help="shape B height (A is the config's 64x64)")
    ap.add_argument("--width", type=int, default=128, help="shape B width")
    ap.add_argument("--work", type=Path, help="work dir, kept (default: a temp dir, removed at the end)")
    ap.add_argument("--json", type=Path, help="also write every run and the summary here")
    return ap.parse_args(argv)


def run(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> tuple[str, float]:
    t = time.perf_counter()
    proc = subprocess.run(list(argv), env=dict(env), cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.exit(f"capture_loop: {argv[1:3]} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout, time.perf_counter() - t


def cachekeeper(*args: str) -> list[str]:
    return [sys.executable, "-m", "cachekeeper", *args]


def host(work: Path, name: str, env: Mapping[str, str]) -> tuple[Path, dict[str, str], Path]:
    instance = work / name
    (instance / "tmp").mkdir(parents=True)
    return instance, {**env, "TMPDIR": str(instance / "tmp")}, instance / "ck"


def serve(model: Path, args: argparse.Namespace, env: Mapping[str, str], dest: Path, cwd: Path) -> dict[str, Any]:
    out, _ = run([sys.executable, str(SERVE), str(model), "--component", "transformer", "--height",
                  str(args.height), "--width", str(args.width)], {**env, "TORCHINDUCTOR_CACHE_DIR": str(dest)}, cwd)
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def round_(i: int, work: Path, config: Path, model: Path, args: argparse.Namespace,
           env: Mapping[str, str]) -> dict[str, Any]:
    cwd, boot, dest = host(work, f"runtime-{i}", env)
    out, _ = run(cachekeeper("hydrate", "--config", str(config), "--dest", str(dest), "--json"), boot, cwd)
    dest = Path(json.loads(out)["dest"])   # the toolchain's own dir under the dest: what the runtime reads
    runtime = serve(model, args, boot, dest, cwd)
    out, capture_s = run(cachekeeper("capture", "--config", str(config), "--dest", str(dest), "--publish",
                                     "--settle", "0.5", "--nice", "0", "--json"), boot, cwd)
    files = len(json.loads(out)["files"])
    cwd, boot, dest = host(work, f"captured-{i}", env)
    out, hydrate_s = run(cachekeeper("hydrate", "--config", str(config), "--dest", str(dest), "--json"), boot, cwd)
    counts = json.loads(out.splitlines()[0])["counts"]
    dest = Path(json.loads(out.splitlines()[0])["dest"])
    captured = serve(model, args, boot, dest, cwd)
    return {"runtime": runtime, "captured": captured, "capture_s": capture_s, "captured_files": files,
            "hydrate_s": hydrate_s, "hydrate_counts": counts}


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="ck-capture-bench-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CACHEKEEPER_", "TORCHINDUCTOR_"))}
    env["CACHEKEEPER_HOME"] = str(work / "home")
    try:
        run([sys.executable, str(REPO / "examples" / "make_tiny_model.py"), "--out", str(work / "models"),
             "--only", "tiny-flux"], env, work)
        config = work / "tiny.yaml"
        config.write_text((REPO / "examples" / "tiny.yaml").read_text())
        (work / "build-tmp").mkdir()
        _, prebuild_s = run(cachekeeper("prebuild", str(config)), {**env, "TMPDIR": str(work / "build-tmp")}, work)
        rounds = [round_(i, work, config, work / "models" / "tiny-flux", args, env) for i in range(args.repeats)]
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(r[k]["first_call_s"] for r in rounds) for k in ("runtime", "captured")}
    proc = {k: statistics.median(r[k]["process_s"] for r in rounds) for k in ("runtime", "captured")}
    summary = {
        "shape_b": f"{args.height}x{args.width}x1", "repeats": args.repeats, "prebuild_a_s": round(prebuild_s, 2),
        "first_call_s": med, "process_s": proc, "ratio_first_call": round(med["runtime"] / med["captured"], 2),
        "capture_publish_s": statistics.median(r["capture_s"] for r in rounds),
        "captured_files": rounds[0]["captured_files"],
        "hydrate_with_captured_s": statistics.median(r["hydrate_s"] for r in rounds),
        "fxgraph_captured_host": [(r["captured"]["fxgraph_cache_hit"], r["captured"]["fxgraph_cache_miss"])
                                  for r in rounds],
        "hydrate_counts": rounds[-1]["hydrate_counts"],
    }
    print(f"shape B {summary['shape_b']}, {args.repeats} rounds (medians)")
    print(f"  first call, compiled at runtime : {med['runtime']:7.2f} s   (process {proc['runtime']:.2f} s)")
    print(f"  first call, from captured set   : {med['captured']:7.2f} s   (process {proc['captured']:.2f} s)")
    print(f"  ratio runtime / captured        : {summary['ratio_first_call']:7.2f}x")
    print(f"  capture --publish               : {summary['capture_publish_s']:7.2f} s   "
          f"({summary['captured_files']} files)")
    print(f"  hydrate incl. captured set      : {summary['hydrate_with_captured_s']:7.2f} s   "
          f"counts {summary['hydrate_counts']}")
    print(f"  FX graph (hit, miss) on captured hosts: {summary['fxgraph_captured_host']}")
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "rounds": rounds}, indent=2))


if __name__ == "__main__":
    main()
