"""Backend registry. Importing this module imports no backend's runtime (torch etc.)."""

from __future__ import annotations

import importlib
import os

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
    "inductor": ("full", "repeated_blocks", "aot"),
    "neuron": ("eager", "full", "repeated_blocks"),
    "neuron_xla": ("full",),
    "tpu": ("eager", "defer_and_fuse", "full", "repeated_blocks"),
}


def mode_key_options(mode: str, *, pipeline: bool = False) -> dict[str, str]:
    """Entry-key options a compile mode adds (light: no backend runtime imported). Inductor's `aot`
    functions embed the model's bytecode, so the installed diffusers build is part of what they are for;
    one captured from a pipeline call (`pipeline`) also depends on transformers (the text encoders)."""
    if mode != "aot":
        return {}
    from .inductor.aot import key_options

    return dict(key_options(pipeline=pipeline))


def registry() -> dict[str, str]:
    """Built-in backends plus plugins named in CACHEKEEPER_BACKENDS ("name=module:Class,...")."""
    out = dict(REGISTRY)
    for item in filter(None, os.environ.get("CACHEKEEPER_BACKENDS", "").split(",")):
        name, sep, target = item.partition("=")
        if not sep or ":" not in target:
            raise UsageError(f"CACHEKEEPER_BACKENDS: expected name=module:Class, got {item!r}")
        out[name.strip()] = target.strip()
    return out


def modes_for(name: str) -> tuple[str, ...]:
    return MODES[name] if name in MODES else get_backend(name).modes


def get_backend(name: str) -> Backend:
    known_backends = registry()
    try:
        target = known_backends[name]
    except KeyError:
        known = ", ".join(sorted(known_backends))
        raise UsageError(f"unknown backend {name!r}", f"use one of: {known}") from None
    module, _, cls = target.partition(":")
    try:
        klass = getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"backend {name!r} ({target}) cannot be loaded: {exc}",
                         "check the module:Class of the plugin (CACHEKEEPER_BACKENDS) and that its package is "
                         "installed") from None
    if not (isinstance(klass, type) and issubclass(klass, Backend)):
        raise UsageError(f"backend {name!r} ({target}) is not a cachekeeper.backends.base.Backend subclass",
                         "a plugin backend subclasses Backend; cachekeeper.testing.BackendConformance checks one")
    backend: Backend = klass()
    return backend
