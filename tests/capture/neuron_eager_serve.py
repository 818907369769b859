"""A serving process on the SIMULATED torch-neuronx in eager mode: every computing op of one request
compiles to a NEFF in $TORCH_NEURONX_NEFF_CACHE_DIR (or loads it). Prints the runtime's counters as JSON.

    python -m tests.capture.neuron_eager_serve HEIGHT WIDTH
"""

from __future__ import annotations

import json
import sys

import torch
import torch_neuronx  # the simulation (tests/simulated/pkgs), put on PYTHONPATH by the test


def main() -> None:
    height, width = int(sys.argv[1]), int(sys.argv[2])
    sim = torch_neuronx.SIMULATION
    torch.manual_seed(0)
    w = torch.randn(width, 32)
    with sim.eager_mode():
        x = torch.randn(height, width)
        y = torch.nn.functional.gelu(x @ w + 1.0).sum(dim=0)
        scale = torch.tanh(w * 0.5)  # shape-independent ops: the prebuilt NEFFs serve them at every shape
    assert y.shape == (32,) and scale.shape == w.shape
    print(json.dumps(sim.stats()))


if __name__ == "__main__":
    main()
