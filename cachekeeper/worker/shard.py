"""`prebuild --shard I/N`: split a matrix over N independent workers without a database.

Every shard computes the same split from the same inputs, so the split must not depend on what is built
already (that changes while shards run): it is taken over the whole planned matrix, and entries are
weighed by the build cost recorded for the same entry under toolchains *other* than the ones being
built (e.g. the last compiler release), which no shard of this run writes. Longest first onto the
lightest shard (LPT) keeps the slowest shard within 4/3 of the optimum; ties break by entry key.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import UsageError

INDEX_VARS = ("JOB_COMPLETION_INDEX", "AWS_BATCH_JOB_ARRAY_INDEX")   # Kubernetes Indexed Job, AWS Batch array


@dataclass(frozen=True)
class Shard:
    index: int
    count: int

    def label(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str, env: Mapping[str, str] | None = None) -> Shard:
    """`I/N`, or `N` with I from JOB_COMPLETION_INDEX / AWS_BATCH_JOB_ARRAY_INDEX."""
    env = os.environ if env is None else env
    index_text, sep, count_text = text.strip().rpartition("/")
    source = "shard"
    if not sep:
        found = [(var, env[var]) for var in INDEX_VARS if env.get(var, "").strip()]
        if not found:
            raise UsageError(f"shard {text}: no shard index given and neither {' nor '.join(INDEX_VARS)} is set",
                             "give the shard as I/N (I from 0 to N-1), or run as a Kubernetes Indexed Job / "
                             "AWS Batch array job")
        source, index_text = found[0]
    try:
        index, count = int(index_text), int(count_text)
    except ValueError:
        raise UsageError(f"shard {text}: expected I/N or N with whole numbers (e.g. 2/8)") from None
    if count < 1:
        raise UsageError(f"shard {text}: the shard count must be at least 1")
    if not 0 <= index < count:
        shown = f"{source}={index}" if source != "shard" else f"shard {text}"
        raise UsageError(f"{shown}: shard index {index} is out of range 0..{count - 1}",
                         "shard indexes count from 0 to N-1 (Kubernetes completion and AWS Batch array indexes do)")
    return Shard(index, count)


def split(keys: Sequence[str], count: int, costs: Mapping[str, float]) -> list[list[str]]:
    """Each shard's keys: balanced by cost (a key without one weighs the median of the known costs)."""
    known = sorted(c for k, c in costs.items() if c > 0)
    default = known[len(known) // 2] if known else 1.0
    loads = [0.0] * count
    shards: list[list[str]] = [[] for _ in range(count)]
    for key in sorted(set(keys), key=lambda k: (-(costs.get(k) or default), k)):
        i = min(range(count), key=lambda j: (loads[j], j))
        shards[i].append(key)
        loads[i] += costs.get(key) or default
    return shards
