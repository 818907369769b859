"""Light probes of the XLA-era Neuron toolchain: the installed neuronx-cc, whose version names the cache's
top-level dir (`neuronxcc-<version>`). Metadata only: nothing here loads the compiler.
"""

from __future__ import annotations

from ..toolchain import dist_version


def compiler_version() -> str | None:
    return dist_version("neuronx-cc")


def version_dir(compiler_version: str) -> str:
    return f"neuronxcc-{compiler_version}"
