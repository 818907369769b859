"""cachekeeper: prebuild, publish and hydrate compiler caches for PyTorch models."""

__version__ = "0.1.0"
