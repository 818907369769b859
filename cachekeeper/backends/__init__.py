"""Backend registry. Importing this module imports no backend's runtime (torch etc.)."""

from __future__ import annotations

import importlib

from .. import settings
from ..errors import UsageError
from .base import Backend

# name -> "module:Class"; modules stay light at import time (torch only inside build subprocesses).
REGISTRY: dict[str, str] = {
    "inductor": "cachekeeper.backends.inductor:InductorBackend",
    "neuron": "cachekeeper.backends.neuron:NeuronBackend",
    "tpu": "cachekeeper.backends.tpu:TPUBackend",
    "neuron_xla": "cachekeeper.backends.neuron_xla:NeuronXlaBackend",
}

def registry() -> dict[str, str]:
    """Built-in backends plus plugins named in CACHEKEEPER_BACKENDS ("name=module:Class,...")."""
    out = dict(REGISTRY)
    for item in settings.BACKENDS.get() or ():
        name, sep, target = item.partition("=")
        if not sep or ":" not in target:
            raise UsageError(f"{settings.BACKENDS.name}: expected name=module:Class, got {item!r}")
        out[name.strip()] = target.strip()
    return out


def modes_for(name: str) -> tuple[str, ...]:
    """The compile modes backend `name` declares (Backend.modes)."""
    return backend_class(name).modes


def compile_modes_for(name: str, mode: str | None = None) -> tuple[str, ...]:
    """The torch.compile modes backend `name` takes (Backend.compile_modes), in compile mode `mode` if given
    (Backend.compile_modes_in)."""
    cls = backend_class(name)
    return cls.compile_modes if mode is None else cls.compile_modes_in(mode)


def can_offload(name: str) -> bool:
    """Whether backend `name` runs a pipeline warm-up with CPU offload (Backend.can_offload)."""
    return backend_class(name).can_offload


def mode_key_options(backend: str, mode: str, *, pipeline: bool = False) -> dict[str, str]:
    """Entry-key options backend `backend`'s compile mode `mode` adds (Backend.mode_key_options)."""
    return get_backend(backend).mode_key_options(mode, pipeline=pipeline)


def get_backend(name: str) -> Backend:
    backend: Backend = backend_class(name)()
    return backend


def backend_class(name: str) -> type[Backend]:
    """The class registered as `name` (its module imported; light by the registry's rule)."""
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
    return klass
