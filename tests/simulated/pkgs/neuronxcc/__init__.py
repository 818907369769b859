"""SIMULATION of the neuronx-cc compiler package, for cachekeeper's tests. Not the real neuronx-cc.

Only its version matters: it comes from the `neuronx_cc-*.dist-info` the test generated
(tests/simulated/__init__.py: make_site), so a test simulates a compiler upgrade by generating another.
"""

from __future__ import annotations

import importlib.metadata

try:
    __version__ = importlib.metadata.version("neuronx-cc")
except importlib.metadata.PackageNotFoundError:  # code on the path without its metadata
    __version__ = "0+simulated"
