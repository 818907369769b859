"""An example backend plugin: its "compiler" writes each entry's key into a few files of its cache dir.

It imports only the names the backend contract documents (cachekeeper.backends.base, docs/backends.md).
Its toolchain is the env var ECHO_TOOLCHAIN, so a test can play another host. ECHO_FAULT=KeyError makes its
fingerprint raise that builtin exception, as a probe nobody wrapped does.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Mapping
from pathlib import Path

from cachekeeper.backends.base import Backend, BackendUnavailable, BuildCommand, BuildJob, Fingerprint


class EchoBackend(Backend):
    name = "echo"
    env_var = "ECHO_CACHE_DIR"

    def fingerprint(self, options: Mapping[str, str]) -> Fingerprint:
        if fault := os.environ.get("ECHO_FAULT"):
            raise getattr(builtins, fault)("echo fault injected in fingerprint")
        return Fingerprint.of(self.name, {"toolchain": os.environ.get("ECHO_TOOLCHAIN", "1")})

    def unavailable_reason(self, options: Mapping[str, str] | None = None) -> str | None:
        return os.environ.get("ECHO_UNAVAILABLE") or None

    def include(self, root: str, relpath: str, path: Path) -> bool:
        return not relpath.endswith(".lock")

    def build_command(self, job: BuildJob) -> BuildCommand:
        if self.unavailable_reason(job.options):
            raise BackendUnavailable.of(self.name, "ECHO_UNAVAILABLE is set")
        return self.python_module_command("ck_echo_backend.build", job, {})
