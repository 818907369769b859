"""This host's toolchain for a backend: the backend, the options it runs with here, and the fingerprint every
artifact it may use must carry. The prebuild worker, the hydrate engine and the CLI all ask this module, so
a build and a boot on the same host compute the same key. Light: no backend runtime is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import BackendUnavailable, UsageError

if TYPE_CHECKING:
    from ..config import Config
    from ..format.fingerprint import Fingerprint
    from .base import Backend


@dataclass(frozen=True)
class HostToolchain:
    """One backend as this host would run it: the fingerprint its artifacts must carry."""

    name: str
    backend: Backend
    fingerprint: Fingerprint
    options: dict[str, str]


def pick_backend(config: Config | None, backend: str | None) -> str:
    """The named backend, or the config's only one; several or none is a usage error."""
    if backend:
        return backend
    names = config.backend_names() if config else []
    if len(names) == 1:
        return names[0]
    raise UsageError("which backend? name one" + (f" (the config names {', '.join(names)})" if names else ""))


def backend_options(config: Config | None, backend: str, options: Mapping[str, str] | None = None,
                    device: str | None = None) -> dict[str, str]:
    """The config's options for `backend`, overridden by `options`, then by `device`."""
    merged = config.backend_options_for(backend) if config else {}
    merged.update(options or {})
    if device:
        merged["device"] = device
    return merged


def host_toolchain(config: Config | None, name: str, options: Mapping[str, str] | None = None,
                   device: str | None = None) -> HostToolchain:
    """This host's toolchain for backend `name`; a backend that cannot run here is an error, not a miss."""
    from . import get_backend

    backend = get_backend(name)
    opts = backend_options(config, name, options, device)
    reason = backend.unavailable_reason(opts)
    if reason:
        raise BackendUnavailable.of(name, f"not usable on this host: {reason}")
    return HostToolchain(name, backend, backend.fingerprint(opts), opts)


__all__ = ["HostToolchain", "backend_options", "host_toolchain", "pick_backend"]
