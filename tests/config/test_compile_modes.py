"""`compile_modes`: the torch.compile `mode` a server passes is a matrix option, in the entry's key, and the
build compiles with it (so a max-autotune server's kernels are autotuned by the build, not at its boot)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cachekeeper.backends.base import BuildJob
from cachekeeper.backends.inductor.build import compile_options
from cachekeeper.config import parse_config
from cachekeeper.errors import ConfigError
from tests.cli_env import one_error_line, run_cli

BASE = """version: 1
defaults: {{backends: [{backends}], modes: {modes}, shapes: {{height: [64], width: [64]}}}}
models:
  - {{name: a, path: /tmp, {extra}}}
"""


def entries(extra: str = "", backends: str = "inductor", modes: str = "[full]") -> list[tuple[str, dict[str, str]]]:
    config = parse_config(BASE.format(backends=backends, modes=modes, extra=extra or "component: transformer"))
    return [(e.spec.label(), dict(e.spec.options)) for e in config.entries()]


def test_the_default_mode_adds_nothing_so_existing_keys_stay() -> None:
    plain = parse_config(BASE.format(backends="inductor", modes="[full]", extra="component: transformer"))
    listed = parse_config(BASE.format(backends="inductor", modes="[full]", extra="compile_modes: [default]"))
    assert [e.spec.key for e in plain.entries()] == [e.spec.key for e in listed.entries()]


def test_each_listed_mode_is_an_entry_whose_key_names_it() -> None:
    got = entries("compile_modes: [max-autotune, default]")
    assert got == [("a/transformer inductor:full 64x64x1 float32", {}),
                   ("a/transformer inductor:full 64x64x1 float32,compile_mode=max-autotune",
                    {"compile_mode": "max-autotune"})]


def test_an_aot_entry_and_a_backend_without_compile_modes_are_built_once() -> None:
    got = entries("compile_modes: [max-autotune]", backends="inductor, neuron",
                  modes="{inductor: [full, aot], neuron: [full]}")
    by_backend = [(label.split()[1], opts.get("compile_mode")) for label, opts in got]
    assert ("inductor:full", "max-autotune") in by_backend and ("inductor:aot", None) in by_backend
    assert ("neuron:full", None) in by_backend and len(got) == 3


@pytest.mark.parametrize(("extra", "message"), [
    ("compile_modes: [max-autotun]", "unknown compile mode 'max-autotun'; did you mean 'max-autotune'?"),
    ("compile_modes: [max-autotune, reduce-overhead, max-autotune]", "max-autotune"),
    ("compile_modes: [{mode: max-autotune}]", "compile mode"),
])
def test_a_bad_compile_mode_is_one_config_error(extra: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("?", r"\?").replace("(", r"\(")):
        entries(extra)


def test_a_compile_mode_none_of_the_models_backends_takes_is_refused() -> None:
    with pytest.raises(ConfigError, match="compile mode 'max-autotune' is not one its backends take"):
        entries("compile_modes: [max-autotune]", backends="neuron")


def test_the_build_compiles_with_the_entrys_mode_over_the_backend_option() -> None:
    config = parse_config(BASE.format(backends="inductor", modes="[full]", extra="compile_modes: [max-autotune]"))
    entry = next(e for e in config.entries() if e.spec.options)
    job = BuildJob(entry.spec, entry.model, {"cache": "/x"}, {"device": "cpu", "mode": "reduce-overhead"})
    assert compile_options(job)["mode"] == "max-autotune"
    other = parse_config(BASE.format(backends="inductor", modes="[full]", extra="component: transformer"))
    plain = BuildJob(other.entries()[0].spec, entry.model, {"cache": "/x"}, {"mode": "reduce-overhead"})
    assert compile_options(plain)["mode"] == "reduce-overhead"


def test_validate_names_a_bad_compile_mode_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "ck.yaml"
    config.write_text(BASE.format(backends="inductor", modes="[full]", extra="compile_modes: [turbo]"))
    proc = run_cli(["validate", str(config)], {"PATH": "/usr/bin:/bin"}, tmp_path, ok=False)
    line = one_error_line(proc)
    assert "ck.yaml:4" in line and "unknown compile mode 'turbo'" in line and proc.returncode == 2
