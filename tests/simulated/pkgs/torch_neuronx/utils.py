"""SIMULATION of torch_neuronx/utils.py (0.1.0): the platform target the runtime reads from the device
(csrc/core/utils/PlatformUtils.cpp: nrt_get_instance_info, mapped to trn1/trn2/trn3; no env override) and
the logical core setting (NEURON_LOGICAL_NC_CONFIG verbatim, else 2 on trn2/trn3)."""

from __future__ import annotations


def get_platform_target() -> str:
    import torch_neuronx

    return torch_neuronx._target()


def get_lnc_setting() -> int:
    import torch_neuronx

    return int(torch_neuronx._lnc())
