"""The plugin's own conformance module: cachekeeper's BackendConformance, run where the plugin is installed
(tests/plugins/test_backend_plugin.py runs it in such a process)."""

from __future__ import annotations

from typing import ClassVar

import pytest

from cachekeeper.backends.base import Backend, EntrySpec, ModelRef, Shape
from cachekeeper.testing.backends import BackendConformance, BuildParts


class TestEchoBackend(BackendConformance):
    graph_option = None        # its fingerprint is one env knob (ECHO_TOOLCHAIN), whatever the options
    artifacts: ClassVar[dict[str, bytes]] = {"ab/0123.bin": b"compiled"}
    debris: ClassVar[dict[str, bytes]] = {"compile.lock": b""}

    @pytest.fixture
    def backend(self, monkeypatch: pytest.MonkeyPatch) -> Backend:
        monkeypatch.setenv("CACHEKEEPER_BACKENDS", "echo=ck_echo_backend:EchoBackend")
        from ck_echo_backend import EchoBackend

        return EchoBackend()

    @pytest.fixture
    def build_parts(self) -> BuildParts:
        spec = EntrySpec("m", "transformer", "echo", "full", Shape(64, 64, 1), "float32")
        return spec, ModelRef("m", "transformer"), {}
