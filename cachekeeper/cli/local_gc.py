"""`gc --dest DIR` / `gc --node-cache DIR`: a disk budget applied to a hydrated dir or a node cache.

Plans (one line per entry or blob it would evict, least recently used first) unless `--run`. A dest's
entries wanted by a kept lockfile, or used within `--min-age`, are never evicted; a node cache never
evicts a blob a dest links. Runs under the dest's lock, so never beside a hydrate of the same dest.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import UsageError
from .node_options import parse_bytes
from .options import say


def local_gc(dests: tuple[str, ...], node_cache: str | None, max_bytes: str | None, keep_lockfiles: tuple[str, ...],
             min_age: float, execute: bool, as_json: bool) -> None:
    if max_bytes is None:
        raise UsageError("gc --dest / --node-cache needs --max-bytes (the budget to fit)")
    # --min-age was checked where it entered (gc's `number` option, bounds.MIN_AGE)
    budget = parse_bytes(max_bytes, "--max-bytes")
    from ..boot.destdir import served_dir

    for dest in dests:   # the budget is the current toolchain's dir (older ones `gc --dest` reclaims whole)
        _gc_dest(served_dir(Path(dest).absolute()), budget, keep_lockfiles, min_age, execute, as_json)
    if node_cache:
        _gc_node(Path(node_cache), budget, execute, as_json)


def _gc_dest(dest: Path, budget: int, keep_lockfiles: tuple[str, ...], min_age: float, execute: bool,
             as_json: bool) -> None:
    from ..boot import usage
    from ..boot.resolve import read_lockfile
    from ..boot.state import load_state, state_dir
    from ..errors import DestinationError
    from ..fs.locks import FileLock

    keep = {p.name for f in keep_lockfiles for p in read_lockfile(Path(f))[2]}
    with FileLock(state_dir(dest) / "lock", timeout=0):
        state = load_state(dest)
        if state is None:
            raise DestinationError(f"{dest} was not hydrated by cachekeeper (no state file)")
        ev = usage.plan(dest, state, budget, keep=keep, min_age=min_age)
        for e in ev.evict:
            _line(as_json, execute, "entry", e.name, e.size)
        if execute:
            usage.apply(dest, state, ev)
    verb = "evicted" if execute else "to evict (pass --run)"
    say(f"gc: {dest} holds {ev.held} bytes of budget {budget}; {len(ev.evict)} entries ({ev.freed} bytes) {verb}"
        + (f"; still {ev.short} bytes over (entries in use, kept or used within {min_age:.0f}s)" if ev.short else ""))


def _gc_node(root: Path, budget: int, execute: bool, as_json: bool) -> None:
    from ..boot.nodecache import NodeCache, last_use_order

    cache = NodeCache(root)
    held = cache.size()
    over = held - budget
    freed, evicted = 0, 0
    for sha, size, _, in_use in last_use_order(cache):
        if freed >= over:
            break
        if in_use:
            continue
        _line(as_json, execute, "blob", sha, size)
        freed += size
        evicted += 1
    if execute:
        cache.evict(max(0, over))
    verb = "evicted" if execute else "to evict (pass --run)"
    say(f"gc: node cache {root} holds {held} bytes of budget {budget}; {evicted} blobs ({freed} bytes) {verb}"
        + (f"; still {over - freed} bytes over (blobs linked into dests)" if over > freed else ""))


def _line(as_json: bool, execute: bool, kind: str, name: str, size: int) -> None:
    if as_json:
        click.echo(json.dumps({"action": "evict", "run": execute, "kind": kind, "name": name, "bytes": size}))
    else:
        click.echo(f"{'evict' if execute else 'would evict'}  {kind} {name}  ({size} bytes)")
