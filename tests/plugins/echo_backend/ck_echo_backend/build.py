"""The build subprocess: `python -m ck_echo_backend.build '<BuildJob json>'` compiles into the job's roots."""

from __future__ import annotations

import sys
from pathlib import Path

from cachekeeper.backends.base import CACHE_ROOT, BuildJob


def main(argv: list[str]) -> int:
    job = BuildJob.from_json(argv[1])
    cache = Path(job.roots[CACHE_ROOT])
    key = job.spec.key
    for i in range(3):
        (cache / key[:2]).mkdir(parents=True, exist_ok=True)
        (cache / key[:2] / f"{key[2:14]}-{i}.bin").write_text(f"{key} {job.model.name} {i}\n")
    (cache / "compile.lock").write_text("")   # what a runtime leaves behind; include() keeps it out
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
