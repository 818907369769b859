"""A simulated compile for benchmarks: a backend plugin whose build sleeps (or burns CPU) for SIM_SECONDS
and writes SIM_FILES files of SIM_BYTES each, as a compiler would fill its cache dir.

    CACHEKEEPER_BACKENDS=sim=benchmarks.sim_backend:SimBackend
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from cachekeeper.backends.base import CACHE_ROOT, Backend, BuildCommand, BuildJob, Fingerprint

REPO = Path(__file__).resolve().parents[1]


class SimBackend(Backend):
    name = "sim"
    env_var = "SIM_CACHE_DIR"
    modes: ClassVar[tuple[str, ...]] = ("full",)

    def fingerprint(self, options: Mapping[str, str]) -> Fingerprint:
        return Fingerprint.of("sim", {"toolchain": os.environ.get("SIM_TOOLCHAIN", "1")})

    def unavailable_reason(self, options: Mapping[str, str] | None = None) -> str | None:
        return None

    def build_command(self, job: BuildJob) -> BuildCommand:
        # The build script imports nothing of cachekeeper: its start-up is the interpreter's alone.
        env = {**os.environ, "SIM_KEY": job.spec.key}
        script = Path(__file__).with_name("sim_build.py")
        return BuildCommand([sys.executable, "-S", str(script), job.roots[CACHE_ROOT]], env)
