"""`cachekeeper doctor --device-check`: does this host's runtime really read what cachekeeper hydrates?

On the real device (a TPU VM, a Trainium instance), once per new toolchain: build one tiny entry into a
temp store, hydrate it into a fresh dir, start a fresh serving process on that dir and read the runtime's
own counters (TorchTPU: its compilation cache's hits and misses; Neuron, which has none: the NEFFs the
server added to the dir). A server that compiled anything fails the check. Nothing but the temp store
and the backend's own build and serve processes is used: no network, no catalog.

The serving process is the backend's build module run again with the hydrated dir as its cache root: the
same loader, placement, compile call and warm-up call a server makes, in a process that starts empty.
The tiny model is a FLUX transformer of a few layers, written by `python -m cachekeeper.backends.device_check
make-model DIR` in a subprocess (diffusers and torch stay out of the doctor process).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BuildFailed, DeviceCheckFailed
from ..format.spec import EntrySpec, ModelRef, Shape
from .base import CACHE_ROOT, Backend, BuildJob

MODEL = "device-check"
COMPONENT = "transformer"
SHAPE = Shape(64, 64, 1)
WARMUP_OPTIONS = {"text_len": "8"}
# A FLUX.1 transformer at toy width (random weights, fixed seed): compiles in seconds, as every mode does.
TINY_TRANSFORMER: dict[str, Any] = {
    "patch_size": 1, "in_channels": 16, "num_layers": 1, "num_single_layers": 1, "attention_head_dim": 16,
    "num_attention_heads": 2, "joint_attention_dim": 32, "pooled_projection_dim": 32, "guidance_embeds": True,
    "axes_dims_rope": [4, 6, 6],
}


@dataclass(frozen=True)
class DeviceCheck:
    backend: str
    mode: str
    fingerprint: str
    prebuild: Mapping[str, Any]      # the build's counters
    served: Mapping[str, Any]        # the fresh server's counters on the hydrated dir
    source: str                      # "runtime" (its own counters) or "cache-dir diff" (new files)
    published: int                   # files the prebuild published

    @property
    def ok(self) -> bool:
        return self.published > 0 and self.served.get("compiled") == 0

    def failure(self) -> DeviceCheckFailed | None:
        """Why the check failed (the server compiled, or the prebuild left nothing to hydrate), or None."""
        if self.ok:
            return None
        compiled = int(self.served.get("compiled") or 0)
        what = (f"compiled {compiled} times ({self.source}); its cache key covers something the fingerprint "
                "does not, or it does not read the dir") if self.published else "had nothing to read: the " \
            "prebuild published no artifact"
        exc = DeviceCheckFailed(f"device check: a fresh {self.backend} server on the hydrated dir {what}",
                                fingerprint=self.fingerprint)
        exc.compiled = compiled
        return exc

    def lines(self) -> list[str]:
        return [f"device check: {self.backend} (mode {self.mode}, fingerprint {self.fingerprint})",
                f"  prebuild: compiled {self.prebuild.get('compiled')}, loaded {self.prebuild.get('loaded')} "
                f"({self.source}); {self.published} files published",
                f"  server on the hydrated dir: compiled {self.served.get('compiled')}, loaded "
                f"{self.served.get('loaded')} ({self.source})"]


def make_model(dest: Path) -> Path:
    """The tiny transformer under `dest/<MODEL>/<COMPONENT>` (runs in the subprocess: imports diffusers)."""
    import torch
    from diffusers import FluxTransformer2DModel

    cls: Any = FluxTransformer2DModel  # diffusers is untyped
    torch.manual_seed(0)
    out = dest / MODEL / COMPONENT
    cls(**TINY_TRANSFORMER).save_pretrained(out)
    return out


def _run(argv: list[str], env: Mapping[str, str] | None, cwd: Path, timeout: float, what: str) -> None:
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise BuildFailed(f"device check: the {what} failed (exit {proc.returncode}):\n{tail}")


def _build(backend: Backend, job: BuildJob, cwd: Path, env: Mapping[str, str], timeout: float) -> dict[str, Any]:
    import json

    cmd = backend.build_command(job)
    cmd.env.update(env)
    _run(cmd.argv, cmd.env, cwd, timeout, "build" if not env else "server")
    result: dict[str, Any] = json.loads(Path(job.result_path).read_text())
    return result


def run_device_check(backend: Backend, options: Mapping[str, str], *, mode: str = "full",
                     model: Path | None = None, serve_env: Mapping[str, str] | None = None,
                     timeout: float = 1800) -> DeviceCheck:
    """Prebuild, publish, hydrate, serve, and count (`DeviceCheck.failure()` says whether it passed)."""
    from ..boot.hydrate import hydrate
    from ..publish import publish
    from ..stores.file import FileStore

    opts = {**WARMUP_OPTIONS, **options}
    fp = backend.fingerprint(opts)
    spec = EntrySpec(MODEL, COMPONENT, backend.name, mode, SHAPE, "float32")
    with tempfile.TemporaryDirectory(prefix="ck-device-check-") as tmp_name:
        tmp = Path(tmp_name)
        if model is None:
            _run([sys.executable, "-m", __name__, "make-model", str(tmp / "models")], None, tmp, timeout,
                 "tiny model")
            model = tmp / "models" / MODEL
        ref = ModelRef(MODEL, COMPONENT, path=str(model), inputs="flux")
        roots = backend.build_roots(tmp / "prebuild")
        for root in roots.values():
            root.mkdir(parents=True)
        job = BuildJob(spec, ref, {k: str(v) for k, v in roots.items()}, opts, str(tmp / "prebuild.json"))
        first = _build(backend, job, tmp, {}, timeout)
        store = FileStore(tmp / "store")
        published = publish(store, fingerprint=fp, spec=spec, roots=roots, include=backend.include)
        dest = tmp / "hydrated"
        hydrate(open_store=lambda: store, fingerprint=fp, dest=dest, extra_roots={})
        served_job = BuildJob(spec, ref, {CACHE_ROOT: str(dest)}, opts, str(tmp / "served.json"))
        served = _build(backend, served_job, tmp, {**backend.env_exports(dest), **(serve_env or {})}, timeout)
    return DeviceCheck(backend.name, mode, fp.id, first["counters"], served["counters"],
                       str(served.get("counters_source", "")), len(published.manifest.files))

if __name__ == "__main__":
    if sys.argv[1:2] != ["make-model"] or len(sys.argv) != 3:
        sys.exit("usage: python -m cachekeeper.backends.device_check make-model DIR")
    make_model(Path(sys.argv[2]))
