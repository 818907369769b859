"""`cachekeeper doctor --device-check`: does this host's runtime really read what cachekeeper hydrates?

On the real device (a TPU VM, a Trainium instance), once per new toolchain: build one tiny entry into a
temp store, hydrate it into a fresh dir, start a fresh serving process on that dir, and judge it by what the
runtime itself says and by what it wrote:

  * `compiled` = graphs the server compiled itself: TorchTPU, `_get_cache_stats().per_entry_stats[]` with
    `compilation_duration > 0` (its hit/miss counters count tier 1 only); Neuron,
    `CompilationCache.TotalCompilations` with TORCH_NEURONX_METRICS_ENABLED=1. `loaded` = those it read.
  * cross-checked by the served dir: new or changed artifacts (names, sizes, sha256) are compiles too.
  * the server runs with a tier-2 cache of its own (TorchTPU; removed afterwards, so nothing is served from
    /dev/shm) and backup compilation off, and with another step count, prompt and seed than the build.

Then one verdict table: one row per fact of docs/backends.md that only hardware can confirm (`FACTS`), each
pass, fail, or "not checked" with the reason. Nothing but the temp store and the backend's own build and
serve processes is used: no network, no catalog.

The serving process is the backend's build module run again with the hydrated dir as its cache root: the
same loader, placement, compile call and warm-up call a server makes, in a process that starts empty.
The tiny model is a FLUX transformer of a few layers, written by `python -m cachekeeper.admin.device_check
make-model DIR` in a subprocess (diffusers and torch stay out of the doctor process).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import settings
from ..backends.base import CACHE_ROOT, Backend, BuildJob
from ..errors import BackendUnavailable, DeviceCheckBuildFailed, DeviceCheckFailed, DeviceCheckNeedsModule
from ..format.spec import EntrySpec, ModelRef, Shape

MODEL = "device-check"
COMPONENT = "transformer"
SHAPE = Shape(64, 64, 1)
WARMUP_OPTIONS = {"text_len": "8"}
# The server's pipeline call differs from every build's (pipeline_warmup: prompt "warmup", 2 steps, seed 0).
SERVE_CALL = {"steps": 3, "prompt": "a different prompt than the build's", "seed": 1}
# A FLUX.1 transformer at toy width (random weights, fixed seed): compiles in seconds, as every mode does.
TINY_TRANSFORMER: dict[str, Any] = {
    "patch_size": 1, "in_channels": 16, "num_layers": 1, "num_single_layers": 1, "attention_head_dim": 16,
    "num_attention_heads": 2, "joint_attention_dim": 32, "pooled_projection_dim": 32, "guidance_embeds": True,
    "axes_dims_rope": [4, 6, 6],
}

PASS, FAIL, NOT_CHECKED = "pass", "fail", "not checked"

# The facts of docs/backends.md that only hardware confirms, by the id its tables name ("device-check row").
FACTS: dict[str, dict[str, str]] = {
    "tpu": {
        "tpu.reads-tier3": "a fresh server reads the hydrated tier-3 dir (env var, layout, key inputs) and "
                           "compiles nothing",
        "tpu.stats-counters": "per_entry_stats[].compilation_duration > 0 counts exactly the local compiles "
                              "(equal to the tier-3 files the build wrote)",
        "tpu.platform-dir": "the server keys on the tier-3 platform dir the build wrote under this fingerprint",
        "tpu.private-tier2": "a private tier-2 name keeps /dev/shm out of the check and is removed afterwards",
        "tpu.scalar-steps": "eager keys do not depend on num_inference_steps (another step count compiles "
                            "nothing)",
        "tpu.slot-chip0": "a single-chip slot build on chip N keys like a server on chip 0",
        "tpu.backup-off": "with backup compilation off a hydrated server spends no compile at boot",
    },
    "neuron": {
        "neuron.reads-neffs": "a fresh server reads the hydrated NEFF dir (env var, layout, key inputs) and "
                              "compiles nothing",
        "neuron.metrics-counters": "CompilationCache.TotalCompilations (metrics on) counts exactly the NEFFs "
                                   "the build wrote",
        "neuron.target-lnc": "the runtime's platform target and LNC equal the fingerprint's",
        "neuron.tp-one-neff": "a 2-rank tensor-parallel compile writes one NEFF per graph (ranks share it)",
        "neuron.python-layout": "sync eager (NEURON_LAUNCH_BLOCKING=1) writes <64hex>/<64hex>.neff",
        "neuron.scalar-steps": "eager keys do not depend on num_inference_steps (another step count compiles "
                               "nothing)",
    },
}


@dataclass(frozen=True)
class Row:
    fact: str
    verdict: str     # pass | fail | not checked
    detail: str

    def line(self) -> str:
        return f"  {self.fact:<24} {self.verdict:<12} {self.detail}"


@dataclass(frozen=True)
class DeviceCheck:
    backend: str
    mode: str
    fingerprint: str
    prebuild: Mapping[str, Any]      # the build's counters
    served: Mapping[str, Any]        # the fresh server's counters on the hydrated dir
    source: str                      # "runtime" (its own counters) or "cache-dir diff" (new files)
    published: int                   # files the prebuild published
    served_files: Mapping[str, Any] = field(default_factory=dict)   # what the server added/changed
    rows: tuple[Row, ...] = ()

    @property
    def wrote(self) -> int:
        return int(self.served_files.get("added", 0)) + int(self.served_files.get("changed", 0))

    @property
    def ok(self) -> bool:
        return (self.published > 0 and self.served.get("compiled") == 0 and self.wrote == 0
                and not any(r.verdict == FAIL for r in self.rows))

    def failure(self) -> DeviceCheckFailed | None:
        """Why the check failed (the server compiled or wrote, a row failed, or the prebuild left nothing to
        hydrate), or None."""
        if self.ok:
            return None
        compiled = int(self.served.get("compiled") or 0)
        failed = [r.fact for r in self.rows if r.verdict == FAIL]
        if not self.published:
            what = "had nothing to read: the prebuild published no artifact"
        elif compiled or self.wrote:
            what = (f"compiled {compiled} times ({self.source}) and wrote {self.wrote} files; its cache key covers "
                    "something the fingerprint does not, or it does not read the dir")
        else:
            what = f"compiled nothing, but facts failed: {', '.join(failed)}"
        exc = DeviceCheckFailed(f"device check: a fresh {self.backend} server on the hydrated dir {what}",
                                fingerprint=self.fingerprint)
        exc.compiled = compiled
        return exc

    def lines(self) -> list[str]:
        files = self.served_files
        out = [f"device check: {self.backend} (mode {self.mode}, fingerprint {self.fingerprint})",
               f"  prebuild: compiled {self.prebuild.get('compiled')}, loaded {self.prebuild.get('loaded')} "
               f"({self.source}); {self.published} files published",
               f"  server on the hydrated dir: compiled {self.served.get('compiled')}, loaded "
               f"{self.served.get('loaded')} ({self.source}); files added {files.get('added', 0)}, changed "
               f"{files.get('changed', 0)}"]
        if self.rows:
            out.append(f"  {'fact':<24} {'verdict':<12} detail")
            out.extend(r.line() for r in self.rows)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "mode": self.mode, "fingerprint": self.fingerprint,
                "prebuild": dict(self.prebuild), "served": dict(self.served), "counters_source": self.source,
                "published": self.published, "served_files": dict(self.served_files), "ok": self.ok,
                "rows": [{"fact": r.fact, "verdict": r.verdict, "detail": r.detail} for r in self.rows]}


def make_model(dest: Path) -> Path:
    """The tiny transformer under `dest/<MODEL>/<COMPONENT>` (runs in the subprocess: imports diffusers)."""
    import torch
    from diffusers import FluxTransformer2DModel

    cls: Any = FluxTransformer2DModel  # diffusers is untyped
    torch.manual_seed(0)
    out = dest / MODEL / COMPONENT
    cls(**TINY_TRANSFORMER).save_pretrained(out)
    return out


def _last_line(text: str) -> str:
    """The child's own error line if it printed one, else its last line (a traceback's last)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("cachekeeper-build: error: ")]
    return (errors or lines or ["no output"])[-1]


_MISSING_MODULE = re.compile(r"(?:ModuleNotFoundError|ImportError): No module named '([\w.]+)'")


def _run(argv: list[str], env: Mapping[str, str] | None, cwd: Path, timeout: float, what: str) -> None:
    """Run one of the check's processes; any way it fails is one DeviceCheckBuildFailed line."""
    try:
        proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise DeviceCheckBuildFailed(f"device check: the {what} ran past {timeout:g}s and was stopped") from None
    except OSError as exc:   # the backend's build_command names a program that cannot run
        raise DeviceCheckBuildFailed(f"device check: the {what} cannot start ({argv[0]}): "
                                     f"{exc.strerror or exc}") from None
    if proc.returncode != 0:
        # One line: the child's own last line (its `cachekeeper-build: error:` line, or a traceback's last).
        last = _last_line(proc.stderr or proc.stdout).removeprefix("cachekeeper-build: error: ")
        if missing := _MISSING_MODULE.search(last):
            raise DeviceCheckNeedsModule(f"device check: the {what} needs {missing.group(1).partition('.')[0]}, "
                                         f"which is not installed in this environment ({argv[0]})")
        raise DeviceCheckBuildFailed(f"device check: the {what} failed (exit {proc.returncode}): {last}")


def _build(backend: Backend, job: BuildJob, cwd: Path, env: Mapping[str, str], timeout: float,
           what: str) -> tuple[dict[str, Any], dict[str, str]]:
    cmd = backend.build_command(job)
    cmd.env.update(env)
    _run(cmd.argv, cmd.env, cwd, timeout, what)
    return _result(Path(job.result_path), what), cmd.env


def _result(path: Path, what: str) -> dict[str, Any]:
    """The JSON result a build wrote at the job's `result_path`: a mapping with its `counters`."""
    try:
        result = json.loads(path.read_text())
    except FileNotFoundError:
        raise DeviceCheckBuildFailed(f"device check: the {what} exited 0 but wrote no result file ({path}); its "
                                     "build module writes the job's result_path") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DeviceCheckBuildFailed(f"device check: the {what}'s result file {path} cannot be read: "
                                     f"{getattr(exc, 'strerror', None) or exc}") from None
    if not isinstance(result, dict) or not isinstance(result.get("counters"), dict):
        raise DeviceCheckBuildFailed(f"device check: the {what}'s result file {path} holds no `counters` "
                                     "(the runtime's compile and load counts the check judges by)")
    return result


def preflight(backend: Backend, options: Mapping[str, str]) -> None:
    """Refuse, in one line, a host that cannot run the check: no package (or no torch), or no device."""
    if reason := backend.unavailable_reason(options):
        raise BackendUnavailable.of(backend.name, f"cannot run the device check here: {reason}",
                                    f"run it on the {backend.name} host that serves, with its packages installed")
    if reason := backend.device_reason(options):
        raise BackendUnavailable.of(backend.name, f"cannot run the device check here: {reason}",
                                    f"run it on the {backend.name} host that serves (hydrate needs no device; the "
                                    "check does)")


def _is_pipeline(model: Path) -> bool:
    return (model / "model_index.json").is_file()


def run_device_check(backend: Backend, options: Mapping[str, str], *, mode: str = "full",
                     model: Path | None = None, serve_env: Mapping[str, str] | None = None,
                     timeout: float = 1800) -> DeviceCheck:
    """Prebuild, publish, hydrate, serve, count, and judge each fact (`DeviceCheck.failure()` says whether
    it passed)."""
    from ..config.hydrate import HydrateOptions
    from ..hydration.engine import Target, hydrate
    from ..publish.upload import publish
    from ..stores.file import FileStore

    opts = {**WARMUP_OPTIONS, **options}
    preflight(backend, opts)
    fp = backend.fingerprint(opts)
    pipeline = model is not None and _is_pipeline(model)
    # A pipeline warm-up as the config writes one (no CFG, a short prompt padding: seconds on a tiny model).
    spec_options = (("guidance", "off"), ("max_sequence_length", "16"), ("warmup", "pipeline")) if pipeline else ()
    spec = EntrySpec(MODEL, COMPONENT, backend.name, mode, SHAPE, "float32", options=spec_options)
    slot = _slot_env(backend, opts)
    with tempfile.TemporaryDirectory(prefix="ck-device-check-") as tmp_name:
        tmp = Path(tmp_name)
        if model is None:
            _run([sys.executable, "-m", __name__, "make-model", str(tmp / "models")], None, tmp, timeout,
                 "tiny model")
            model = tmp / "models" / MODEL
        ref = (ModelRef(MODEL, COMPONENT, path=str(model), inputs="auto", warmup="pipeline", max_sequence_length=16)
               if pipeline else ModelRef(MODEL, COMPONENT, path=str(model), inputs="flux"))
        roots = backend.build_roots(tmp / "prebuild")
        for root in roots.values():
            root.mkdir(parents=True)
        job = BuildJob(spec, ref, {k: str(v) for k, v in roots.items()}, opts, str(tmp / "prebuild.json"))
        first, _ = _build(backend, job, tmp, slot, timeout, "build")
        store = FileStore(tmp / "store")
        published = publish(store, fingerprint=fp, spec=spec, roots=roots, include=backend.include,
                            relocatable_roots=backend.relocatable_roots)
        dest = tmp / "hydrated"
        hydrate(Target(fp, dest), HydrateOptions(), lambda: store)
        served_job = BuildJob(spec, ref, {CACHE_ROOT: str(dest)}, opts, str(tmp / "served.json"))
        env = {**backend.env_exports(dest), settings.SERVE_CALL.name: json.dumps(SERVE_CALL), **(serve_env or {})}
        served, served_env = _build(backend, served_job, tmp, env, timeout, "server")
        tp = _tp_build(backend, spec, ref, opts, tmp, timeout)
    rows = judge(backend, dict(fp.fields), first, served, served_env, pipeline=pipeline, slot=slot, tp=tp,
                 mode=mode)
    return DeviceCheck(backend.name, mode, fp.id, first["counters"], served["counters"],
                       str(served.get("counters_source", "")), len(published.manifest.files),
                       served.get("files", {}), tuple(rows))


def _slot_env(backend: Backend, options: Mapping[str, str]) -> dict[str, str]:
    """TorchTPU with 2+ chips: the prebuild runs in the slot of the last chip, as build.workers would place
    it, so the server (on chip 0) shows whether a single-chip slice numbers its chip 0."""
    if backend.name != "tpu":
        return {}
    count = backend.build_devices(options) or 0
    return backend.device_env([count - 1]) if count >= 2 else {}


def _tp_build(backend: Backend, spec: EntrySpec, ref: ModelRef, options: Mapping[str, str], tmp: Path,
              timeout: float) -> dict[str, Any] | str:
    """Neuron with 2+ cores: a 2-rank build of the same entry, for the one-NEFF-per-graph row; else why not."""
    if backend.name != "neuron":
        return "not a Neuron check"
    cores = backend.build_devices(options) or 0
    if cores < 2:
        return f"this host gives builds {cores} NeuronCore(s); the 2-rank build needs 2"
    tp_spec = EntrySpec(spec.model, spec.component, spec.backend, spec.mode, spec.shape, spec.dtype,
                        options=(*spec.options, ("tp", "2")))
    tp_ref = ModelRef(ref.name, ref.component, path=ref.path, inputs=ref.inputs, tensor_parallel=2)
    roots = backend.build_roots(tmp / "tp")
    for root in roots.values():
        root.mkdir(parents=True)
    job = BuildJob(tp_spec, tp_ref, {k: str(v) for k, v in roots.items()}, options, str(tmp / "tp.json"))
    result, _ = _build(backend, job, tmp, backend.device_env([0, 1]), timeout, "2-rank build")
    return result


def _row(fact: str, verdict: str, detail: str) -> Row:
    return Row(fact, verdict, detail)


def judge(backend: Backend, fields: Mapping[str, str], first: Mapping[str, Any], served: Mapping[str, Any],
          served_env: Mapping[str, str], *, pipeline: bool, slot: Mapping[str, str],
          tp: Mapping[str, Any] | str, mode: str) -> list[Row]:
    """One row per hardware-only fact of the backend (FACTS), from the two (or three) runs' records."""
    name = backend.name
    if name not in FACTS:
        return []
    pc, sc = first.get("counters", {}), served.get("counters", {})
    pf, sf = first.get("files", {}), served.get("files", {})
    s_compiled, s_wrote = int(sc.get("compiled") or 0), int(sf.get("added", 0)) + int(sf.get("changed", 0))
    read_ok = s_compiled == 0 and s_wrote == 0 and int(sc.get("loaded") or 0) > 0
    read = _row(f"{name}.{'reads-tier3' if name == 'tpu' else 'reads-neffs'}", PASS if read_ok else FAIL,
                f"server compiled {s_compiled}, loaded {sc.get('loaded')}, wrote {s_wrote} files "
                f"({', '.join(list(sf.get('added_names', [])) + list(sf.get('changed_names', []))) or 'none'})")
    counted = int(pc.get("compiled") or 0)
    agree = counted == int(pf.get("added", 0)) and counted > 0
    counters = _row(f"{name}.{'stats-counters' if name == 'tpu' else 'metrics-counters'}", PASS if agree else FAIL,
                    f"prebuild counted {counted} compiles and wrote {pf.get('added', 0)} files")
    if pipeline:
        steps_ok = s_compiled == 0 and s_wrote == 0
        steps = _row(f"{name}.scalar-steps", PASS if steps_ok else FAIL,
                     f"server ran {SERVE_CALL['steps']} steps, the build 2" if steps_ok else
                     f"eager keys depend on num_inference_steps here: list your server's step counts in "
                     f"backend_options.{name}.warmup_steps")
    else:
        steps = _row(f"{name}.scalar-steps", NOT_CHECKED, "the built-in model is a bare transformer (no scheduler): "
                     "pass --model <a tiny pipeline dir> with --mode eager")
    rows = [read, counters]
    if name == "tpu":
        rows += _tpu_rows(fields, first, served, served_env, slot, read_ok)
    else:
        rows += _neuron_rows(fields, first, tp)
    rows.append(steps)
    return rows


def _tpu_rows(fields: Mapping[str, str], first: Mapping[str, Any], served: Mapping[str, Any],
              served_env: Mapping[str, str], slot: Mapping[str, str], read_ok: bool) -> list[Row]:
    from ..backends.tpu.probes import BACKUP_ENV, TIER2_ENV, tier2_base

    built, used = list(first.get("top_dirs", [])), list(served.get("top_dirs", []))
    platform = _row("tpu.platform-dir", PASS if len(built) == 1 and used == built else FAIL,
                    f"build wrote {built or 'none'}, server used {used or 'none'} (pjrt_platform "
                    f"{fields.get('pjrt_platform', '?')})")
    name = served_env.get(TIER2_ENV, "")
    left = bool(name) and (tier2_base(served_env) / name).exists()
    tier2 = _row("tpu.private-tier2", FAIL if left or not name else PASS,
                 f"server's tier-2 cache {name or '(none)'} " + ("is still there" if left else "was removed"))
    if slot:
        chip = slot.get("TPU_VISIBLE_CHIPS", "?")
        chip0 = _row("tpu.slot-chip0", PASS if read_ok else FAIL, f"prebuild in the slot of chip {chip}, server on "
                     "chip 0" + ("" if read_ok else ": the device assignment in the key differs"))
    else:
        chip0 = _row("tpu.slot-chip0", NOT_CHECKED, "fewer than 2 chips: no other chip to build on")
    backup = _row("tpu.backup-off", PASS if served_env.get(BACKUP_ENV) == "0" and read_ok else NOT_CHECKED,
                  "server ran with backup compilation off and compiled nothing" if read_ok else
                  "the runtime counts no backup compiles; judged only when the server compiled nothing")
    return [platform, tier2, chip0, backup]


def _neuron_rows(fields: Mapping[str, str], first: Mapping[str, Any], tp: Mapping[str, Any] | str) -> list[Row]:
    facts = first.get("runtime", {})
    if facts.get("platform_target") is None:
        target = _row("neuron.target-lnc", NOT_CHECKED, str(facts.get("why", "the build recorded no target")))
    else:
        same = (facts["platform_target"], str(facts["lnc"])) == (fields.get("target"), fields.get("logical_nc_config"))
        unknown = "" if fields.get("target") != "unknown" else ": set backend_options.neuron.target"
        target = _row("neuron.target-lnc", PASS if same else FAIL,
                      f"runtime {facts['platform_target']} LNC {facts['lnc']}, fingerprint {fields.get('target')} "
                      f"LNC {fields.get('logical_nc_config')}{unknown}")
    if isinstance(tp, str):
        tp_row = _row("neuron.tp-one-neff", NOT_CHECKED, tp)
    else:
        c = tp.get("counters", {})
        compiled, loaded, files = int(c.get("compiled") or 0), int(c.get("loaded") or 0), int(tp.get("artifacts", 0))
        ok = compiled == files > 0 and loaded == compiled
        tp_row = _row("neuron.tp-one-neff", PASS if ok else FAIL,
                      f"2 ranks: {files} NEFFs, compiled {compiled}, loaded {loaded}")
    python_layout = [n for n in first.get("files", {}).get("added_names", []) if len(n.split("/")[0]) == 64]
    if os.environ.get("NEURON_LAUNCH_BLOCKING") == "1":
        layout = _row("neuron.python-layout", PASS if python_layout else FAIL,
                      f"{len(python_layout)} NEFFs in <64hex>/<64hex>.neff")
    else:
        layout = _row("neuron.python-layout", NOT_CHECKED, "NEURON_LAUNCH_BLOCKING is not 1 here (async eager "
                      "uses the C++ layout); rerun with it set to check")
    return [target, tp_row, layout]


if __name__ == "__main__":
    if sys.argv[1:2] != ["make-model"] or len(sys.argv) != 3:
        sys.exit("usage: python -m cachekeeper.admin.device_check make-model DIR")
    make_model(Path(sys.argv[2]))
