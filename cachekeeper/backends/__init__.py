"""Backend registry. Importing this module imports no backend's runtime (torch etc.)."""

from __future__ import annotations

import importlib

from ..errors import UsageError
from .base import Backend

# name -> "module:Class"; modules stay light at import time (torch only inside build subprocesses).
REGISTRY: dict[str, str] = {
    "inductor": "cachekeeper.backends.inductor:InductorBackend",
    "neuron": "cachekeeper.backends.neuron:NeuronBackend",
    "tpu": "cachekeeper.backends.tpu:TPUBackend",
    "neuron_xla": "cachekeeper.backends.neuron_xla:NeuronXlaBackend",
}

# Compile modes each backend supports (config validation reads this without importing backends).
MODES: dict[str, tuple[str, ...]] = {
    "inductor": ("full", "repeated_blocks"),
    "neuron": ("eager", "full", "repeated_blocks"),
    "neuron_xla": ("full",),
    "tpu": ("eager", "defer_and_fuse", "full", "repeated_blocks"),
}


def get_backend(name: str) -> Backend:
    try:
        target = REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(REGISTRY))
        raise UsageError(f"unknown backend {name!r}", f"use one of: {known}") from None
    module, _, cls = target.partition(":")
    backend: Backend = getattr(importlib.import_module(module), cls)()
    return backend
