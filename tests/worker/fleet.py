"""A fake backend for fleet tests: the fake build (tests/fake_build.py) plus a record of what each build
saw (its pid, the pid of a compiler-like child it spawns, its device env, start and end times), and
devices to partition (`FLEET_DEVICES` of them, restricted through `FLEET_VISIBLE`).

Enabled with CACHEKEEPER_BACKENDS=fake=tests.worker.fleet:FleetBackend; records go to $FLEET_LOG/.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from cachekeeper.backends.base import BuildCommand, BuildJob
from tests.fakes import REPO, FakeBackend

ENABLE = {"CACHEKEEPER_BACKENDS": "fake=tests.worker.fleet:FleetBackend"}


class FleetBackend(FakeBackend):
    device_unit: ClassVar[str] = "fake core"

    def build_command(self, job: BuildJob) -> BuildCommand:
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        return BuildCommand([sys.executable, "-m", "tests.worker.fleet", job.to_json()], env)

    def build_devices(self, options: Mapping[str, str]) -> int | None:
        return int(os.environ["FLEET_DEVICES"]) if os.environ.get("FLEET_DEVICES") else None

    def device_env(self, ids: Sequence[int]) -> dict[str, str]:
        return {"FLEET_VISIBLE": ",".join(map(str, ids))}


def main() -> int:
    from tests.fake_build import main as fake_build

    log = Path(os.environ["FLEET_LOG"]) if os.environ.get("FLEET_LOG") else None
    job = BuildJob.from_json(sys.argv[1])
    # A child like a compiler worker: it must die with the build's worker too.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    record = {"key": job.spec.key, "pid": os.getpid(), "child": child.pid, "pgid": os.getpgid(0),
              "visible": os.environ.get("FLEET_VISIBLE"), "start": time.time()}
    if log is not None:
        (log / f"{job.spec.key}.{os.getpid()}.start").write_text(json.dumps(record))
    try:
        rc = fake_build()
    finally:
        child.kill()
        child.wait()
    if log is not None:
        (log / f"{job.spec.key}.{os.getpid()}.end").write_text(json.dumps({**record, "end": time.time()}))
    return rc


if __name__ == "__main__":
    sys.exit(main())
