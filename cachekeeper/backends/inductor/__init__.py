"""PyTorch Inductor (CPU/CUDA): compiled-graph and kernel caches plus the precompiled C++ header.
Light at import (no torch): the hydrate path uses it."""

from .backend import InductorBackend

__all__ = ["InductorBackend"]
