"""Build subprocess of the fake backend (see tests/fakes.py)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

from cachekeeper.backends.base import BuildJob


def main() -> int:
    job = BuildJob.from_json(sys.argv[1])
    if os.environ.get("FAKE_BUILD_SLEEP"):
        time.sleep(float(os.environ["FAKE_BUILD_SLEEP"]))
    if os.environ.get("FAKE_BUILD_FAIL"):
        print("fake compiler: internal error at graph 7", file=sys.stderr)
        return 3
    seed = f"{job.spec.key}:{os.environ.get('FAKE_TOOLCHAIN', '1')}".encode()
    cache = Path(job.roots["cache"])
    for i in range(int(os.environ.get("FAKE_SMALL_FILES", "12"))):
        p = cache / f"{i % 3:02d}" / f"k{i}.neff"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(hashlib.sha256(seed + i.to_bytes(4, "big")).digest() * (50 + i % 200))
    if os.environ.get("FAKE_GRAPH_FILES"):   # one graph per entry, as a static-shape compiler writes (sim_serve)
        graphs = cache / "graphs"
        graphs.mkdir(parents=True, exist_ok=True)
        (graphs / f"{job.spec.model}-{job.spec.shape.label()}.neff").write_bytes(seed)
    (cache / "same-a.bin").write_bytes(b"identical")
    (cache / "same-b.bin").write_bytes(b"identical")
    (cache / "busy.lock").write_bytes(b"")
    big = int(os.environ.get("FAKE_LARGE_BYTES", str(5 << 20)))
    (cache / "large.bin").write_bytes((seed * (big // len(seed) + 1))[:big])
    shared = Path(job.roots["shared"])
    shared.mkdir(parents=True, exist_ok=True)
    # Named by toolchain, bytes differ per build (like Inductor's precompiled header).
    (shared / "header.gch").write_bytes(f"header {os.environ.get('FAKE_TOOLCHAIN', '1')} {time.time_ns()}".encode())
    Path(job.result_path).write_text(json.dumps({"compiled": 1}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
