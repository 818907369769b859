"""TorchTPU (torch_tpu on Cloud TPU v6e/v7x): tier-3 compilation cache backend. Light at import (no torch)."""

from .backend import TPUBackend

__all__ = ["TPUBackend"]
