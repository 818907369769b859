"""`build.workers`: N builds at once on one host, each on its own slice of the backend's devices.

Pure: the backend says how many devices it sees (`Backend.build_devices`) and how to restrict a build to
some of them (`Backend.device_env`); here they are split into N equal contiguous slices.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..backends.base import Backend
from ..bounds import cpus
from ..errors import ConfigError


def slot_envs(backend: Backend, options: Mapping[str, str], workers: int, source: str,
              setting: str = "build.workers") -> list[dict[str, str]]:
    """One env per worker slot; all empty when one worker builds or the backend's builds share the host.
    More workers than the backend's devices, or (for builds that share the host) than its CPUs, is an
    error naming `setting` (`build.workers` of the config at `source`, or the `--workers` flag)."""
    if workers <= 1:
        return [{}]
    count = backend.build_devices(options)
    where = f"{source}: {setting}" if setting == "build.workers" else setting
    if count is None:
        if workers > cpus():
            raise ConfigError(f"{where} is {workers} but this host has {cpus()} CPUs",
                              f"set {setting} to at most {cpus()}: each build compiles on its own CPU")
        return [{} for _ in range(workers)]
    if workers > count:
        raise ConfigError(f"{where} is {workers} but backend {backend.name} sees {count} "
                          f"{backend.device_unit}{'s' if count != 1 else ''} on this host",
                          f"set {setting} to at most {count}, or give the host more {backend.device_unit}s")
    per = count // workers
    return [backend.device_env(list(range(i * per, (i + 1) * per))) for i in range(workers)]
