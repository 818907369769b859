"""SIMULATION of the libtpu package, for cachekeeper's tests. Not the real libtpu (there is no .so).

Its version comes from the `libtpu-*.dist-info` a test generated (tests/simulated: make_site), whose
RECORD lists a `libtpu/libtpu.so` hash that changes with the version, as a real wheel's does.
PLATFORM_VERSION stands in for the PjRt platform version string the real library reports.
"""

from __future__ import annotations

import importlib.metadata

try:
    __version__ = importlib.metadata.version("libtpu")
except importlib.metadata.PackageNotFoundError:
    __version__ = "0+simulated"

PLATFORM_VERSION = f"PJRT C API (simulated)\nTFRT TPU libtpu {__version__}"
