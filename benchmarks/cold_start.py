"""First-call latency of a compiled diffusers component, five ways, side by side in one run:

  cold      empty TORCHINDUCTOR_CACHE_DIR and TMPDIR: Inductor compiles everything (and the C++ header)
  hydrate   `cachekeeper hydrate` from a store into a fresh dir + fresh TMPDIR, then a new process
  aot       the same for an Inductor `aot` entry (precompiled function), served by cachekeeper.runtime
  mega      PyTorch Mega-Cache: torch.compiler.load_cache_artifacts(blob) into an empty dir, then compile
  warm      the cache dir a cold run filled, in place (the best a long-lived host gets)

With --pipeline MODEL[,MODEL] it measures what a pipeline server sees instead (examples/serve_pipeline.py:
load the pipeline, `pipe.transformer.compile(fullgraph=True, dynamic=False)` or, for aot,
`cachekeeper.runtime.compile_pipeline(pipe)`, first `pipe(...)` call with a prompt, step count and seed
other than the prebuild's), for `warmup: pipeline` entries: cold, warm (in place), hydrate, aot, and
aot_miss (aot at another height, which the matrix has in mode full: the fallback is a warm load).

Each run is a new process (examples/serve.py); rounds interleave the scenarios so background load hits
all of them alike. Prints medians, ratios to cold and a breakdown (hydrate wall time, Dynamo tracing,
backend time = cache load on a hit). Not a test: it takes minutes on a CPU.

    python benchmarks/cold_start.py                       # tiny Flux transformer, CPU, 3 repeats
    python benchmarks/cold_start.py --device cuda --repeats 5 --json results.json
    python benchmarks/cold_start.py --pipeline tiny-flux2-klein,tiny-flux1   # whole-pipeline first call
    python examples/make_tiny_model.py --out /tmp/m --only tiny-unet &&
      python benchmarks/cold_start.py --model /tmp/m/tiny-unet --component unet --inputs unet
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
SCENARIOS = ("cold", "hydrate", "aot", "mega", "warm")
COLUMNS = ("first_call_s", "process_s", "hydrate_s", "dynamo_s", "backend_s", "mega_cache_load_s")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--repeats", type=int, default=3, help="runs per scenario (median reported; default 3)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--model", type=Path, help="diffusers folder (default: the tiny Flux model, built here)")
    ap.add_argument("--component", default="transformer")
    ap.add_argument("--inputs", default="auto")
    ap.add_argument("--height", type=int, default=64)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--work", type=Path, help="work dir, kept (default: a temp dir, removed at the end)")
    ap.add_argument("--json", type=Path, help="also write every run and the summary here")
    ap.add_argument("--pipeline", metavar="MODEL[,MODEL]", help="the pipeline scenarios for tiny pipelines "
                    "(tiny-flux2-klein, tiny-flux1, comma-separated): first pipe(...) call, cold, warm, hydrated, "
                    "hydrated aot (compile_pipeline) and its fallback at another height")
    return ap.parse_args(argv)


def run(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> tuple[str, float]:
    """stdout of a command and its wall time; a failure stops the benchmark with the stderr tail."""
    t = time.perf_counter()
    proc = subprocess.run(list(argv), env=dict(env), cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"cold_start: {' '.join(argv[:3])}... failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout, time.perf_counter() - t


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args, self.work = args, work
        self.store = f"file://{work / 'store'}"
        self.config = work / "bench.yaml"
        self.aot_config = work / "bench-aot.yaml"   # the same matrix in mode aot: its own entry, same store
        self.model = args.model.resolve() if args.model else work / "models" / "tiny-flux"
        self.mega_blob = work / "mega-cache.bin"
        self.warm_dir: tuple[Path, Path] | None = None
        self.n = 0

    def fresh(self, label: str) -> tuple[Path, Path]:
        """A new (cache dir, TMPDIR) pair: nothing from earlier runs, no precompiled header."""
        self.n += 1
        cache, tmp = self.work / f"{self.n:02d}-{label}" / "cache", self.work / f"{self.n:02d}-{label}" / "tmp"
        tmp.mkdir(parents=True)
        return cache, tmp

    def env(self, cache: Path, tmp: Path) -> dict[str, str]:
        return {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "TMPDIR": str(tmp)}

    def serve(self, cache: Path, tmp: Path, *extra: str) -> dict[str, Any]:
        a = self.args
        argv = [sys.executable, str(SERVE), str(self.model), "--component", a.component, "--inputs", a.inputs,
                "--height", str(a.height), "--width", str(a.width), "--batch", str(a.batch), "--dtype", a.dtype,
                "--device", a.device, *extra]
        out, _ = run(argv, self.env(cache, tmp), self.work)
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return result

    # --- setup -------------------------------------------------------------------------------------

    def setup(self) -> None:
        a = self.args
        if not a.model:
            run([sys.executable, str(REPO / "examples" / "make_tiny_model.py"), "--out", str(self.work / "models"),
                 "--only", "tiny-flux"], os.environ, self.work)
        for config, mode in ((self.config, "full"), (self.aot_config, "aot")):
            config.write_text(json.dumps({   # JSON is YAML
                "version": 1,
                "defaults": {"backends": ["inductor"], "modes": [mode], "dtypes": [a.dtype],
                             "shapes": {"height": [a.height], "width": [a.width], "batch": [a.batch]}},
                "backend_options": {"inductor": {"device": a.device}},
                "models": [{"name": "bench", "path": str(self.model), "component": a.component,
                            "inputs": a.inputs}],
            }, indent=1))
            print(f"prebuild ({mode}) into {self.store} ...", flush=True)
            _, secs = run(["cachekeeper", "prebuild", str(config), "--store", self.store, "--no-catalog"],
                          os.environ, self.work)
            print(f"prebuild ({mode}): {secs:.1f} s", flush=True)

    # --- scenarios ---------------------------------------------------------------------------------

    def cold(self) -> dict[str, Any]:
        cache, tmp = self.fresh("cold")
        save = [] if self.mega_blob.exists() else ["--mega-cache-save", str(self.mega_blob)]
        result = self.serve(cache, tmp, *save)
        self.warm_dir = self.warm_dir or (cache, tmp)
        return result

    def hydrate(self) -> dict[str, Any]:
        cache, tmp = self.fresh("hydrate")
        # TMPDIR as the server will have it: hydrate puts the precompiled header there.
        out, secs = run(["cachekeeper", "hydrate", "--config", str(self.config), "--dest", str(cache),
                         "--store", self.store, "--json"], self.env(cache, tmp), self.work)
        cache = Path(json.loads(out)["dest"])   # the toolchain's own dir under the dest
        return {**self.serve(cache, tmp), "hydrate_s": round(secs, 3)}

    def aot(self) -> dict[str, Any]:
        cache, tmp = self.fresh("aot")
        out, secs = run(["cachekeeper", "hydrate", "--config", str(self.aot_config), "--dest", str(cache),
                         "--store", self.store, "--json"], self.env(cache, tmp), self.work)
        cache = Path(json.loads(out)["dest"])   # the toolchain's own dir under the dest
        result = self.serve(cache, tmp, "--mode", "aot")
        if result.get("fallback_calls"):
            sys.exit(f"cold_start: the aot run fell back to compiling: {result.get('fallbacks')}")
        return {**result, "hydrate_s": round(secs, 3)}

    def mega(self) -> dict[str, Any]:
        cache, tmp = self.fresh("mega")
        return self.serve(cache, tmp, "--mega-cache-load", str(self.mega_blob))

    def warm(self) -> dict[str, Any]:
        assert self.warm_dir is not None, "warm runs after a cold run"
        return self.serve(*self.warm_dir)


def measure(bench: Bench, repeats: int) -> dict[str, list[dict[str, Any]]]:
    bench.setup()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in SCENARIOS}
    for i in range(repeats):
        for name in SCENARIOS:   # cold first: it fills the warm dir and saves the Mega-Cache blob
            result = getattr(bench, name)()
            runs[name].append(result)
            print(f"round {i + 1} {name:<8} first call {result['first_call_s']:7.2f}s "
                  f"(fx hit {result['fxgraph_cache_hit']}, miss {result['fxgraph_cache_miss']})", flush=True)
    return runs


def summarize(runs: Mapping[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name, rs in runs.items():
        out[name] = {c: statistics.median(r.get(c, 0.0) for r in rs) for c in COLUMNS}
        out[name]["misses"] = max(r["fxgraph_cache_miss"] for r in rs)
        out[name]["hits"] = min(r["fxgraph_cache_hit"] for r in rs)
    return out


def report(summary: Mapping[str, Mapping[str, float]], repeats: int, device: str) -> str:
    cold = summary["cold"]["first_call_s"]
    lines = [f"first call, medians of {repeats} new processes ({device}):",
             f"{'scenario':<9} {'first call':>10} {'vs cold':>8} {'process':>8} {'hydrate':>8} {'dynamo':>7} "
             f"{'backend':>8} {'mega load':>9} {'fx hit/miss':>11}"]
    for name in SCENARIOS:
        s = summary[name]
        lines.append(f"{name:<9} {s['first_call_s']:>9.2f}s {cold / s['first_call_s']:>7.1f}x {s['process_s']:>7.1f}s "
                     f"{s['hydrate_s']:>7.2f}s {s['dynamo_s']:>6.2f}s {s['backend_s']:>7.2f}s "
                     f"{s['mega_cache_load_s']:>8.2f}s {int(s['hits']):>5}/{int(s['misses'])}")
    h, m = summary["hydrate"], summary["mega"]
    lines.append(f"hydrate vs mega-cache: {m['first_call_s'] / h['first_call_s']:.1f}x faster first call; "
                 f"hydrate + first call {h['hydrate_s'] + h['first_call_s']:.1f}s vs cold {cold:.1f}s")
    a, w = summary["aot"], summary["warm"]
    a_total = a["hydrate_s"] + a["first_call_s"]
    lines.append(f"aot: hydrate + first call {a_total:.2f}s = {a_total / w['first_call_s']:.2f}x the warm "
                 f"cache-dir first call (target <= 0.6x), 1/{cold / a_total:.0f} of cold (target >= 1/10)")
    return "\n".join(lines)


# --- the pipeline scenario ---------------------------------------------------------------------------

SERVE_PIPELINE = REPO / "examples" / "serve_pipeline.py"
PIPELINE_SCENARIOS = ("cold", "warm", "hydrate", "aot", "aot_miss")
PIPELINE_TEXT_LEN = 16   # the tiny pipelines' prompt padding, at prebuild and in the server alike
MISS_EXTRA = 32          # aot_miss calls at height + 32: a shape the aot entry was not built for
PIPELINE_PARTS = ("import_s", "load_s", "setup_s", "first_call_s", "process_s", "hydrate_s")


class PipelineBench(Bench):
    """A whole-pipeline server: the prebuild warms the pipeline (`warmup: pipeline`), the server calls it with
    another prompt, step count and seed. `aot` serves `compile_pipeline(pipe)` from an aot entry; `aot_miss`
    calls it at another height, which the matrix lists in mode full only: the fallback's warm load."""

    def __init__(self, args: argparse.Namespace, work: Path, pipeline: str) -> None:
        work.mkdir(parents=True, exist_ok=True)
        super().__init__(args, work)
        self.pipeline = pipeline
        self.model = work / "models" / pipeline
        self.miss_config = work / "bench-aot-miss.yaml"

    def matrix(self, mode: str, height: int) -> dict[str, Any]:
        a = self.args
        return {"name": f"bench-{mode}-{height}", "path": str(self.model), "warmup": "pipeline",
                "max_sequence_length": PIPELINE_TEXT_LEN, "modes": [mode],
                "shapes": {"height": [height], "width": [a.width], "batch": [a.batch]}}

    def write_config(self, path: Path, models: list[dict[str, Any]]) -> None:
        a = self.args
        path.write_text(json.dumps({"version": 1, "defaults": {"backends": ["inductor"], "dtypes": [a.dtype]},
                                    "backend_options": {"inductor": {"device": a.device}}, "models": models},
                                   indent=1))

    def setup(self) -> None:
        a = self.args
        run([sys.executable, str(REPO / "examples" / "make_tiny_model.py"), "--out", str(self.work / "models"),
             "--only", self.pipeline], os.environ, self.work)
        self.write_config(self.config, [self.matrix("full", a.height)])
        self.write_config(self.aot_config, [self.matrix("aot", a.height)])
        self.write_config(self.miss_config, [self.matrix("aot", a.height),
                                             self.matrix("full", a.height + MISS_EXTRA)])
        for config in (self.config, self.miss_config):   # the second builds the aot entry and the miss's
            _, secs = run(["cachekeeper", "prebuild", str(config), "--store", self.store, "--no-catalog"],
                          os.environ, self.work)
            print(f"{self.pipeline}: prebuild {config.name}: {secs:.1f} s", flush=True)

    def serve(self, cache: Path, tmp: Path, *extra: str, height: int | None = None) -> dict[str, Any]:
        a = self.args
        argv = [sys.executable, str(SERVE_PIPELINE), str(self.model), "--height", str(height or a.height),
                "--width", str(a.width), "--images", str(a.batch), "--dtype", a.dtype, "--device", a.device,
                "--max-sequence-length", str(PIPELINE_TEXT_LEN), "--guidance-scale", "1.0",
                "--prompt", f"benchmark prompt {self.n}", "--steps", "3", "--seed", str(self.n), *extra]
        out, _ = run(argv, self.env(cache, tmp), self.work)
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        return result

    def hydrated(self, label: str, config: Path) -> tuple[Path, Path, float]:
        cache, tmp = self.fresh(label)
        _, secs = run(["cachekeeper", "hydrate", "--config", str(config), "--dest", str(cache),
                       "--store", self.store], self.env(cache, tmp), self.work)
        return cache, tmp, secs

    def cold(self) -> dict[str, Any]:
        cache, tmp = self.fresh("cold")
        result = self.serve(cache, tmp)
        self.warm_dir = self.warm_dir or (cache, tmp)
        return result

    def aot(self) -> dict[str, Any]:
        cache, tmp, secs = self.hydrated("aot", self.aot_config)
        result = self.serve(cache, tmp, "--mode", "aot")
        if result.get("fallback_calls") or not result.get("precompiled_calls"):
            sys.exit(f"cold_start: the aot run did not run precompiled: {result.get('fallbacks')}")
        return {**result, "hydrate_s": round(secs, 3)}

    def aot_miss(self) -> dict[str, Any]:
        cache, tmp, secs = self.hydrated("aot-miss", self.miss_config)
        result = self.serve(cache, tmp, "--mode", "aot", height=self.args.height + MISS_EXTRA)
        if result.get("precompiled_calls") or not result.get("fallback_calls"):
            sys.exit(f"cold_start: the aot_miss run did not fall back: {result}")
        return {**result, "hydrate_s": round(secs, 3)}


def measure_pipeline(bench: PipelineBench, repeats: int) -> dict[str, list[dict[str, Any]]]:
    bench.setup()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in PIPELINE_SCENARIOS}
    for i in range(repeats):
        for name in PIPELINE_SCENARIOS:   # cold first: it fills the warm dir
            result = getattr(bench, name)()
            runs[name].append(result)
            print(f"{bench.pipeline} round {i + 1} {name:<8} first pipe() {result['first_call_s']:7.2f}s "
                  f"process {result['process_s']:6.2f}s (fx hit {result['fxgraph_cache_hit']}, "
                  f"miss {result['fxgraph_cache_miss']}, precompiled {result.get('precompiled_calls', '-')}, "
                  f"fallback {result.get('fallback_calls', '-')})", flush=True)
    return runs


def summarize_pipeline(runs: Mapping[str, list[dict[str, Any]]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name, rs in runs.items():
        out[name] = {c: statistics.median(float(r.get(c, 0.0)) for r in rs) for c in PIPELINE_PARTS}
        # The rest of the process (argument parsing, pipeline construction, output), per run: medians of
        # the parts do not add up to the median of the whole.
        out[name]["other_s"] = statistics.median(
            float(r["process_s"]) - sum(float(r.get(c, 0.0)) for c in PIPELINE_PARTS[:4]) for r in rs)
        out[name]["misses"] = max(r["fxgraph_cache_miss"] for r in rs)
        out[name]["hits"] = min(r["fxgraph_cache_hit"] for r in rs)
    return out


def report_pipeline(summary: Mapping[str, Mapping[str, float]], model: str, repeats: int, device: str) -> str:
    cold, warm = summary["cold"]["first_call_s"], summary["warm"]["first_call_s"]
    lines = [f"{model} first pipe(...) call, medians of {repeats} new processes ({device}):",
             f"{'scenario':<9} {'first call':>10} {'vs cold':>8} {'vs warm':>8} {'hydrate':>8} {'import':>7} "
             f"{'load':>6} {'setup':>6} {'process':>8} {'fx hit/miss':>11}"]
    for name in PIPELINE_SCENARIOS:
        s = summary[name]
        lines.append(f"{name:<9} {s['first_call_s']:>9.2f}s {cold / s['first_call_s']:>7.1f}x "
                     f"{s['first_call_s'] / warm:>7.2f}x {s['hydrate_s']:>7.2f}s {s['import_s']:>6.2f}s "
                     f"{s['load_s']:>5.2f}s {s['setup_s']:>5.2f}s {s['process_s']:>7.2f}s "
                     f"{int(s['hits']):>5}/{int(s['misses'])}")
    a, m = summary["aot"], summary["aot_miss"]
    lines.append(f"aot first call 1/{cold / a['first_call_s']:.1f} of cold (target >= 1/10), "
                 f"{a['first_call_s'] / warm:.2f}x warm (target <= 0.6x); with its hydrate "
                 f"{a['hydrate_s'] + a['first_call_s']:.2f}s = {(a['hydrate_s'] + a['first_call_s']) / warm:.2f}x warm")
    lines.append(f"aot_miss (height +{MISS_EXTRA}, fallback) {m['first_call_s'] / warm:.2f}x warm (target <= 1.5x), "
                 f"fx misses {int(m['misses'])}")
    lines.append(f"aot whole process {a['process_s']:.2f}s: imports {a['import_s']:.2f}s, weights "
                 f"{a['load_s']:.2f}s, compile_pipeline {a['setup_s']:.2f}s, first call {a['first_call_s']:.2f}s, "
                 f"other {a['other_s']:.2f}s")
    return "\n".join(lines)


def run_pipelines(args: argparse.Namespace, work: Path) -> None:
    names = [n for n in args.pipeline.split(",") if n]
    results: dict[str, Any] = {}
    reports = []
    for name in names:
        runs = measure_pipeline(PipelineBench(args, work / name, name), args.repeats)
        summary = summarize_pipeline(runs)
        results[name] = {"runs": runs, "summary": summary}
        reports.append(report_pipeline(summary, name, args.repeats, args.device))
    print("\n\n".join(reports))
    if args.json:
        args.json.write_text(json.dumps({"pipelines": results, "args": vars(args)}, default=str, indent=1))


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    work = (args.work or Path(tempfile.mkdtemp(prefix="ck-bench-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    print(f"work dir: {work}", flush=True)
    if args.pipeline:
        try:
            run_pipelines(args, work)
        finally:
            if args.work is None:
                shutil.rmtree(work, ignore_errors=True)
        return
    try:
        runs = measure(Bench(args, work), args.repeats)
    finally:
        if args.work is None:   # each run leaves a ~155 MB precompiled header behind
            shutil.rmtree(work, ignore_errors=True)
    summary = summarize(runs)
    print(report(summary, args.repeats, args.device))
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "summary": summary, "args": vars(args)}, default=str, indent=1))


if __name__ == "__main__":
    main()
