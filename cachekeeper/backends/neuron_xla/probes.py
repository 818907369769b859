"""Light probes of the XLA-era Neuron toolchain: the installed neuronx-cc, whose version names the cache's
top-level dir (`neuronxcc-<version>`). Metadata only: nothing here loads the compiler.
"""

from __future__ import annotations

from ..toolchain import dist_version


def compiler_version() -> str | None:
    return dist_version("neuronx-cc")


def version_dir(compiler_version: str) -> str:
    return f"neuronxcc-{compiler_version}"


def is_version_dir(name: str, compiler_version: str) -> bool:
    """`neuronxcc-<version>`, or `neuronxcc-<version>+<commit>`: optimum-neuron 0.4.5 (cache/hub_cache.py,
    hub_registry_path) says the real dir carries the extended compiler version, with a commit hash that
    the package metadata lacks, and matches on the prefix. `2.22.1` does not match `2.22.1.0`."""
    base = version_dir(compiler_version)
    return name == base or name.startswith(base + "+")
