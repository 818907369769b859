"""SIMULATION of torch_tpu._internal.device."""
