"""The XLA-era torch-neuronx persistent cache (NEURON_COMPILE_CACHE_URL): imported, never compiled.
Light at import (no torch)."""

from .backend import NeuronXlaBackend

__all__ = ["NeuronXlaBackend"]
