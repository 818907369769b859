"""`build.workers`: N builds at once on one host, each on its own slice of the backend's devices.

Pure: the backend says how many devices it sees (`Backend.build_devices`) and how to restrict a build to
some of them (`Backend.device_env`); here they are split into N equal contiguous slices.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..backends.base import Backend
from ..errors import ConfigError


def slot_envs(backend: Backend, options: Mapping[str, str], workers: int, source: str) -> list[dict[str, str]]:
    """One env per worker slot; all empty when one worker builds or the backend's builds share the host."""
    if workers <= 1:
        return [{}]
    count = backend.build_devices(options)
    if count is None:
        return [{} for _ in range(workers)]
    if workers > count:
        raise ConfigError(f"{source}: build.workers is {workers} but backend {backend.name} sees {count} "
                          f"{backend.device_unit}{'s' if count != 1 else ''} on this host",
                          f"set build.workers to at most {count}, or give the host more {backend.device_unit}s")
    per = count // workers
    return [backend.device_env(list(range(i * per, (i + 1) * per))) for i in range(workers)]
