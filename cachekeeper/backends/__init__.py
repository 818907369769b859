"""Backend registry. Importing this module imports no backend's runtime (torch etc.).

A plugin backend (CACHEKEEPER_BACKENDS) is loaded as a subclass of its own class whose host-side methods
(`fingerprint`, the probes, `env_exports`, `build_command`, ...) turn whatever they raise outside the
contract into one `BackendUnavailable` naming the plugin, the original as `__cause__`: a plugin's stray
`KeyError` is one error line, never a traceback. cachekeeper's own backends are not wrapped (a bug of
ours keeps its traceback).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

from .. import settings
from ..errors import BackendUnavailable, UsageError, describe, outside_contract
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
    klass = backend_class(name)
    origin = getattr(klass, "plugin_origin", None)
    try:
        backend: Backend = klass()
    except Exception as exc:
        if origin is None or not outside_contract(exc):
            raise
        raise plugin_error(name, origin, "to start", exc) from exc
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
    return klass if module.partition(".")[0] == "cachekeeper" else _guarded(klass, name, target)


# What cachekeeper calls on a backend in its own process; the build itself runs in a subprocess.
HOST_SIDE = ("fingerprint", "unavailable_reason", "mode_key_options", "device_reason", "build_roots", "env_warnings",
             "extra_roots", "include", "env_exports", "build_command", "build_devices", "device_env")


def plugin_error(name: str, origin: str, doing: str, exc: BaseException) -> BackendUnavailable:
    """The one-line backend error for `exc`, which the plugin backend `name` raised while `doing`."""
    return BackendUnavailable.of(name, f"the backend plugin ({origin}) failed {doing}: {describe(exc)}",
                                 f"the plugin raised {type(exc).__name__}, which the backend contract does not allow "
                                 "(docs/backends.md): check its settings, and report it to the plugin's maintainers")


@functools.cache
def _guarded(klass: type[Backend], name: str, target: str) -> type[Backend]:
    """A subclass of `klass` whose host-side methods translate what they raise outside the contract
    (plugin_error); the plugin's own methods are looked up at each call, as its class has them then."""
    def guard(method: str) -> Callable[..., Any]:
        def call(self: Backend, *args: Any, **kwargs: Any) -> Any:
            try:
                return getattr(super(guarded, self), method)(*args, **kwargs)
            except Exception as exc:
                if not outside_contract(exc):
                    raise
                raise plugin_error(name, target, f"in {method}()", exc) from exc
        call.__name__ = call.__qualname__ = method
        # An abstract method the plugin lacks stays abstract: the class still cannot be instantiated.
        call.__isabstractmethod__ = getattr(getattr(klass, method), "__isabstractmethod__", False)  # type: ignore[attr-defined]
        return call

    space: dict[str, Any] = {m: guard(m) for m in HOST_SIDE}
    space.update(__module__=klass.__module__, __qualname__=klass.__qualname__, __doc__=klass.__doc__,
                 plugin_origin=target)
    guarded: type[Backend] = type(klass.__name__, (klass,), space)
    return guarded
