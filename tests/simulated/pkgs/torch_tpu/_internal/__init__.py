"""SIMULATION of torch_tpu._internal: only the modules cachekeeper calls."""
