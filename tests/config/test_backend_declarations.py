"""The config asks each backend what it supports: its modes, whether it offloads, and the key options a mode
adds (Backend class attributes). A plugin that declares none of them gets the defaults."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import pytest

from cachekeeper.backends.base import Backend, BuildCommand, BuildJob
from cachekeeper.errors import ConfigError
from cachekeeper.format.fingerprint import Fingerprint

from .util import minimal, parse

HERE = __name__


class Bare(Backend):
    """A plugin written against the interface before backends declared modes, offload or key options."""

    name: ClassVar[str] = "bare"
    env_var: ClassVar[str] = "BARE_CACHE_DIR"

    def fingerprint(self, options: Mapping[str, str]) -> Fingerprint:
        raise NotImplementedError  # the planner never asks

    def unavailable_reason(self, options: Mapping[str, str] | None = None) -> str | None:
        return None

    def build_command(self, job: BuildJob) -> BuildCommand:
        raise NotImplementedError


class OnDevice(Bare):
    name: ClassVar[str] = "ondevice"
    modes: ClassVar[tuple[str, ...]] = ("full", "fused")
    can_offload: ClassVar[bool] = False

    def mode_key_options(self, mode: str, *, pipeline: bool = False) -> dict[str, str]:
        return {"fuser": "v2", "whole": str(pipeline)} if mode == "fused" else {}


@pytest.fixture(autouse=True)
def plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CACHEKEEPER_BACKENDS", f"bare={HERE}:Bare,ondevice={HERE}:OnDevice")


def test_a_plugin_that_declares_nothing_builds_full_offloads_and_adds_no_key_options() -> None:
    [entry] = parse(minimal("    backends: [bare]\n    warmup: pipeline\n    offload: model\n")).entries()
    assert (entry.spec.backend, entry.spec.mode) == ("bare", "full")
    assert "diffusers" not in dict(entry.spec.options)
    with pytest.raises(ConfigError, match=r"mode 'fused' is not supported by backend 'bare'.*supported: full"):
        parse(minimal("    backends: [bare]\n    modes: [fused]\n"))


def test_declared_modes_are_accepted_and_their_key_options_enter_the_key() -> None:
    entries = parse(minimal("    backends: [ondevice]\n    modes: [full, fused]\n    warmup: pipeline\n")).entries()
    options = {e.spec.mode: dict(e.spec.options) for e in entries}
    assert options["fused"]["fuser"] == "v2" and options["fused"]["whole"] == "True"
    assert "fuser" not in options["full"]
    keys = {e.spec.mode: e.spec.key for e in entries}
    assert keys["fused"] != keys["full"]


def test_a_backend_that_cannot_offload_is_refused_an_offloading_model() -> None:
    with pytest.raises(ConfigError, match="backend 'ondevice' cannot offload to the CPU"):
        parse(minimal("    backends: [ondevice]\n    warmup: pipeline\n    offload: model\n"))


def test_the_config_accepts_exactly_the_input_builders_the_build_side_has() -> None:
    # The schema cannot import the build side (the boot path reads configs), so it names the builders itself.
    from cachekeeper.backends.warmup import BUILDERS
    from cachekeeper.config import INPUT_BUILDERS

    assert sorted(INPUT_BUILDERS) == sorted(("auto", *BUILDERS))
