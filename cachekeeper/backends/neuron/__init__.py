"""TorchNeuron (native torch-neuronx on Trainium2/3): NEFF cache backend. Light at import (no torch)."""

from .backend import NeuronBackend

__all__ = ["NeuronBackend"]
