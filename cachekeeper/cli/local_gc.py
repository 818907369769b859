"""`gc --dest DIR` / `gc --node-cache DIR`: old toolchains of a hydrated dir, and a disk budget applied to a
hydrated dir or a node cache.

Plans (one line per dir, entry or blob it would remove, least recently used first) unless `--run`. Every
input (paths, budget, kept lockfiles, each dest's layout) is checked before the first deletion. A dest's
current toolchain dir is never removed, and nothing is removed from a dest whose layout.json does not
prove which toolchain is current. A dest's entries wanted by a kept lockfile, or used within `--min-age`,
are never evicted; a node cache never evicts a blob a dest links. Runs under the dest's lock, so never
beside a hydrate of the same dest.
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
    from ..hydration.destdir import Reclaimable, reclaim, reclaimable, resolve_dest, served_dir
    from ..hydration.resolve import read_lockfile

    # Every input first: nothing is deleted unless all of them are good.
    if node_cache and max_bytes is None:
        raise UsageError("gc --node-cache needs --max-bytes (the budget to fit)")
    if keep_lockfiles and max_bytes is None:
        raise UsageError("--keep-lockfile protects entries from the --max-bytes budget; it needs --max-bytes")
    # --min-age was checked where it entered (gc's `number` option, bounds.MIN_AGE)
    budget = parse_bytes(max_bytes, "--max-bytes") if max_bytes is not None else None
    for path, flag in [*((d, "--dest") for d in dests), *([(node_cache, "--node-cache")] if node_cache else [])]:
        if not Path(path).is_dir():
            raise UsageError(f"gc {flag} {path}: no such directory", path=path)
    keep = {p.name for f in keep_lockfiles for p in read_lockfile(Path(f))[2]}
    plans: list[tuple[Path, list[Reclaimable], Path | None]] = []
    for d in dests:
        dest = resolve_dest(Path(d))
        # the budget is the current toolchain's dir (older ones are reclaimed whole)
        plans.append((dest, reclaimable(dest), served_dir(dest) if budget is not None else None))

    total = count = 0
    for dest, items, _ in plans:
        done = reclaim(dest, items) if execute else items
        for item in done:
            verb = "removed" if execute else "would remove"
            click.echo(json.dumps({"action": "remove", "run": execute, "path": str(item.path), "bytes": item.bytes,
                                   "why": item.why}) if as_json else f"{verb}  {item.path}  ({item.why})")
        total += sum(i.bytes for i in done)
        count += len(done)
    if dests:
        say(f"gc: {count} old toolchain dirs/files of {len(dests)} dests, {total / (1 << 20):.1f} MiB "
            + ("removed" if execute else "to remove (pass --run)"))
    if budget is None:
        return
    for _, _, served in plans:
        assert served is not None
        _gc_dest(served, budget, keep, min_age, execute, as_json)
    if node_cache:
        _gc_node(Path(node_cache), budget, execute, as_json)


def _gc_dest(dest: Path, budget: int, keep: set[str], min_age: float, execute: bool, as_json: bool) -> None:
    from ..errors import DestinationError
    from ..hydration import usage
    from ..hydration.state import load_state, records_lock

    with records_lock(dest, timeout=0):
        state = load_state(dest)
        if state is None:
            raise DestinationError(f"{dest} has no state file this release reads (never hydrated, or it was lost); "
                                   "nothing evicted", "hydrate it again (it re-verifies and records what is there)",
                                   path=str(dest))
        ev = usage.plan(dest, state, budget, keep=keep, min_age=min_age)
        for e in ev.evict:
            _line(as_json, execute, "entry", e.name, e.size)
        if execute:
            usage.apply(dest, state, ev)   # deletes only under the dest itself, whatever the state names
    verb = "evicted" if execute else "to evict (pass --run)"
    say(f"gc: {dest} holds {ev.held} bytes of budget {budget}; {len(ev.evict)} entries ({ev.freed} bytes) {verb}"
        + (f"; still {ev.short} bytes over (entries in use, kept or used within {min_age:.0f}s)" if ev.short else ""))


def _gc_node(root: Path, budget: int, execute: bool, as_json: bool) -> None:
    from ..hydration.nodecache import NodeCache, last_use_order

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
