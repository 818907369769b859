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

from cachekeeper.backends.base import CACHE_ROOT, Backend, BuildCommand, BuildJob
from cachekeeper.fingerprint import Fingerprint

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
        return BuildCommand([sys.executable, "-S", str(Path(__file__)), job.roots[CACHE_ROOT]], env)


def _build(cache: Path) -> int:
    import time

    seconds = float(os.environ.get("SIM_SECONDS", "1"))
    if os.environ.get("SIM_MODE", "sleep") == "cpu":
        end = time.process_time() + seconds
        while time.process_time() < end:
            sum(i * i for i in range(10_000))
    else:
        time.sleep(seconds)
    key = os.environ.get("SIM_KEY", "k").encode()
    size = int(os.environ.get("SIM_BYTES", "65536"))
    for i in range(int(os.environ.get("SIM_FILES", "20"))):
        path = cache / f"{i % 4:02d}" / f"{i:05d}.neff"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes((key + i.to_bytes(4, "big")) * (size // (len(key) + 4)))
    return 0


if __name__ == "__main__":
    sys.exit(_build(Path(sys.argv[1])))
