"""The simulated compile of sim_backend.py: sleep (or burn CPU) for SIM_SECONDS, then write SIM_FILES files
of SIM_BYTES each into the cache dir given as the argument. Standard library only: it starts in milliseconds."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def main(cache: Path) -> int:
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
    sys.exit(main(Path(sys.argv[1])))
