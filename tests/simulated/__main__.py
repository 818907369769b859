"""`python -m tests.simulated DIR`: write a site dir with the default simulated versions, print PYTHONPATH."""

from __future__ import annotations

import sys
from pathlib import Path

from . import DEFAULT_VERSIONS, make_site, pythonpath

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tests.simulated DIR")
    print(pythonpath(make_site(Path(sys.argv[1]), DEFAULT_VERSIONS)))
