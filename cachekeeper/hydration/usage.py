"""A dest's disk budget: which entries it holds, when each was last used, and eviction by last use.

    <dest>/.cachekeeper/used/<entry name>.json   the entry's files ("root/path" keys); the file's mtime is
                                                 the entry's last use (hydrate sets it; `state.record_use` too)

Eviction removes whole entries, least recently used first, and never one that is wanted by the running
hydrate, named by a kept lockfile, or used within `min_age` seconds (a server may be reading it). It runs
under the dest lock: the state file drops the entry first (atomically), then its files go (those no kept
entry also places), then its record; a kill between leaves files the state does not name, which a later
hydrate adopts by their hash or a later gc leaves alone (never a listed file that is gone).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..fs.atomic import atomic_write_bytes
from .state import USED, NotARecord, State, plain_file, read_own, safe_rel, save_state, state_dir, used_record


def record(dest: Path, entries: dict[str, list[str]]) -> None:
    """The files of each entry just applied, and now as its last use (not fsynced: a lost record only
    makes an entry look older)."""
    for name, keys in entries.items():
        with contextlib.suppress(OSError):   # a dir or such in its place: the entry only looks older
            atomic_write_bytes(used_record(dest, name), json.dumps(sorted(keys)).encode(), durable=False)


def last_uses(dest: Path) -> dict[str, float]:
    """Each recorded entry's last use (unix seconds); empty for a dest that never recorded one."""
    out: dict[str, float] = {}
    with contextlib.suppress(OSError):
        for e in os.scandir(state_dir(dest) / USED):
            if e.name.endswith(".json"):
                with contextlib.suppress(OSError):
                    out[e.name[:-len(".json")]] = e.stat(follow_symlinks=False).st_mtime
    return out


@dataclass(frozen=True)
class Entry:
    name: str
    files: tuple[str, ...]
    size: int
    last_use: float


@dataclass
class Eviction:
    held: int = 0                                       # bytes the dest's entries hold now
    evict: list[Entry] = field(default_factory=list)    # least recently used first
    freed: int = 0
    short: int = 0                                      # bytes still over the budget after evicting all it may


def entries(dest: Path, state: State) -> list[Entry]:
    """The dest's entries with their size (of the files the state lists) and last use, oldest first."""
    out: list[Entry] = []
    for name in state.manifests:
        path = used_record(dest, name)
        keys, used = _read_record(path)
        out.append(Entry(name, keys, sum(state.files[k].size for k in keys if k in state.files), used))
    return sorted(out, key=lambda e: e.last_use)


def _read_record(path: Path) -> tuple[tuple[str, ...], float]:
    """(the entry's file keys, its last use). A record that is missing, unreadable or not a list of keys
    counts as the oldest and as naming no file (placed before records existed, or written by someone
    else): its entry goes first, and frees only what other entries do not keep."""
    try:
        keys = json.loads(read_own(path, 64 << 20))
        used = os.lstat(path).st_mtime
    except (OSError, NotARecord, ValueError, RecursionError):
        return (), 0.0
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        return (), 0.0
    return tuple(keys), used


def plan(dest: Path, state: State, max_bytes: int, *, keep: Collection[str] = (), min_age: float = 3600.0,
         now: float | None = None) -> Eviction:
    """What to evict so the dest's files fit `max_bytes`. Files two entries share count once and go only
    with the last of them."""
    now = time.time() if now is None else now
    all_entries = entries(dest, state)
    held = sum(f.size for f in state.files.values())
    ev = Eviction(held=held)
    over = held - max_bytes
    claimed: dict[str, int] = {}
    for e in all_entries:
        for k in e.files:
            claimed[k] = claimed.get(k, 0) + 1
    for e in all_entries:
        if over <= 0:
            break
        if e.name in keep or now - e.last_use < min_age:
            continue
        ev.evict.append(e)
        for k in e.files:
            claimed[k] -= 1
            if claimed[k] == 0 and k in state.files:
                ev.freed += state.files[k].size
                over -= state.files[k].size
    ev.short = max(0, over)
    return ev


def apply(dest: Path, state: State, ev: Eviction, roots: Mapping[str, Path] | None = None) -> None:
    """Evict `ev.evict` from `dest` (the caller holds the dest lock). Files are deleted only under `roots`
    (the hydrate's own; default: the dest alone, never a dir the state file names), through real
    directories: a state file is input, and its roots or paths never lead a delete elsewhere."""
    roots = {"cache": dest} if roots is None else roots
    if not ev.evict:
        return
    gone = {e.name for e in ev.evict}
    kept_files = {k for e in entries(dest, state) if e.name not in gone for k in e.files}
    drop = {k for e in ev.evict for k in e.files if k not in kept_files and k in state.files}
    for name in gone:
        state.manifests.pop(name, None)
        state.signed.pop(name, None)
    for k in drop:
        del state.files[k]
    save_state(dest, state)   # first: the state never names a file that is gone
    for k in sorted(drop):
        root, _, rel = k.partition("/")
        path = plain_file(roots[root], rel) if root in roots and safe_rel(rel) else None
        if path is not None:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    for name in gone:
        with contextlib.suppress(FileNotFoundError):
            used_record(dest, name).unlink()

