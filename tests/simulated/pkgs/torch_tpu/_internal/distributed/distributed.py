"""SIMULATION of torch_tpu/_internal/distributed/distributed.py (0.2.0): `set_tpu_launch_env(nproc_per_node=N)`
sets, in the parent and never over a value already set, TORCH_TPU_SLICEBUILDER_ADDRESSES (one
localhost:<free port> per rank) and TORCH_TPU_TOPOLOGY (the generation's map: a count it has no topology
for raises, e.g. 2 chips on v6e); `python -m` prints the launch env. The simulated chip: SIM_TPU_CHIP
(v6e | v7x, default v7x), 8 devices."""

from __future__ import annotations

import os
import socket
import sys

_TOPOLOGY = {"v6e": {1: "1,1,1", 4: "2,2,1", 8: "2,4,1"}, "v7x": {2: "1,1,1,2", 4: "1,2,1,2", 8: "2,2,1,2"}}
DEVICES = 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _topology(count: int) -> str:
    chip = os.environ.get("SIM_TPU_CHIP", "v7x")
    try:
        return _TOPOLOGY[chip][count]
    except KeyError:
        raise RuntimeError(f"No TPU topology found for count: {count}") from None


def set_tpu_launch_env(*, nnodes: int | None = None, nproc_per_node: int | None = None) -> None:
    count = nproc_per_node or DEVICES
    topology = _topology(count)
    os.environ.setdefault("TORCH_TPU_SLICEBUILDER_ADDRESSES",
                          ",".join(f"localhost:{_free_port()}" for _ in range(count)))
    os.environ.setdefault("TORCH_TPU_TOPOLOGY", topology)


if __name__ == "__main__":
    set_tpu_launch_env()
    print(f'TORCH_TPU_TOPOLOGY="{os.environ["TORCH_TPU_TOPOLOGY"]}"')
    print(f'TORCH_TPU_SLICEBUILDER_ADDRESSES="{os.environ["TORCH_TPU_SLICEBUILDER_ADDRESSES"]}"')
    print(f"WORLD_SIZE={len(os.environ['TORCH_TPU_SLICEBUILDER_ADDRESSES'].split(','))}")
    print('NODE_RANK="0"')
    sys.exit(0)
