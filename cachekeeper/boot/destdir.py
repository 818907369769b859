"""Who owns a destination: one subdirectory per toolchain fingerprint, and the env names only that one.

    <dest>/.cachekeeper/layout.json      {"v": 2, "layout": "per-toolchain", "current": <fp id>, "backend": ...}
    <dest>/.cachekeeper/lock             held while the layout file changes and while `gc --dest` reclaims
    <dest>/<fp id>/                      one toolchain's files (what the runtime's env var names)
    <dest>/<fp id>/.cachekeeper/state.json   that toolchain's hydrate state (format: state.py)

An image upgrade on a persistent disk (toolchain A, then B) hydrates B into `<dest>/<B>/` beside A's
files, so the server, pointed at `<dest>/<B>`, never sees a mix and no one has to `rm -rf` anything;
`cachekeeper gc --dest DIR --run` reclaims every toolchain dir but the current one (and the flat files a
release before this layout placed, which its layout-1 state file lists). Pure path logic plus small,
atomic writes; no torch, no store.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..errors import DestinationError, LockBusy
from ..fs.atomic import atomic_write_bytes
from ..fs.locks import FileLock
from ..fs.paths import ensure_dir
from .state import STATE_DIR, load_state, state_dir

LAYOUT_FILE = "layout.json"
LAYOUT_VERSION = 2          # 1: the flat layout (files and state.json directly in the dest)
LAYOUT_NAME = "per-toolchain"


def toolchain_dir(dest: Path, fingerprint_id: str) -> Path:
    """The dir a toolchain's files live in, and the one the runtime's env var names."""
    return dest / fingerprint_id


@dataclass(frozen=True)
class Layout:
    current: str = ""       # the fingerprint id the last hydrate of this dest was for
    backend: str = ""


def read_layout(dest: Path) -> Layout | None:
    """None when `dest` is not a per-toolchain dest (never hydrated, or flat from an older release)."""
    try:
        d = json.loads((state_dir(dest) / LAYOUT_FILE).read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise DestinationError(f"cannot read {state_dir(dest) / LAYOUT_FILE}: {exc}") from None
    if not isinstance(d, dict) or d.get("v") != LAYOUT_VERSION:
        v = d.get("v") if isinstance(d, dict) else None
        raise DestinationError(f"{dest} has dest layout version {v!r}; this release reads version "
                               f"{LAYOUT_VERSION}", "use the cachekeeper release that hydrated it, or a fresh "
                               "destination", path=str(dest))
    return Layout(str(d.get("current", "")), str(d.get("backend", "")))


def claim_layout(dest: Path, fingerprint_id: str, backend: str, *, lock_timeout: float) -> Path:
    """Mark `dest` as per-toolchain with `fingerprint_id` current; the toolchain's dir (not yet created:
    the hydrate creates it once it has something to place)."""
    ensure_dir(dest)
    if not os.access(dest, os.W_OK):
        raise DestinationError(f"destination {dest} is not writable", path=str(dest))
    with FileLock(state_dir(dest) / "lock", timeout=lock_timeout):
        layout = read_layout(dest)
        if layout is None and load_state(dest) is None and any(p.name != STATE_DIR for p in dest.iterdir()):
            raise DestinationError(f"{dest} already holds files cachekeeper did not place",
                                   "hydrate into an empty directory (or one cachekeeper hydrated)", path=str(dest))
        if layout != Layout(fingerprint_id, backend):
            doc = {"v": LAYOUT_VERSION, "layout": LAYOUT_NAME, "current": fingerprint_id, "backend": backend}
            atomic_write_bytes(state_dir(dest) / LAYOUT_FILE, json.dumps(doc, sort_keys=True).encode())
    return toolchain_dir(dest, fingerprint_id)


def served_dir(dest: Path, fingerprint_id: str | None = None) -> Path:
    """The dir a command that reads a hydrated dest (capture) should look at: `fingerprint_id`'s dir, else
    the current one's; a flat (layout 1) dest, or a toolchain dir passed directly, is itself."""
    layout = read_layout(dest) if dest.is_dir() else None
    if layout is None:
        return dest
    if fingerprint_id and toolchain_dir(dest, fingerprint_id).is_dir():
        return toolchain_dir(dest, fingerprint_id)
    return toolchain_dir(dest, layout.current)


@dataclass(frozen=True)
class Reclaimable:
    path: Path           # a toolchain dir, or one flat file of a layout-1 hydrate
    bytes: int
    why: str             # "toolchain <id>" or "layout 1"


def _size(path: Path) -> int:
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    return sum(f.lstat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def reclaimable(dest: Path) -> list[Reclaimable]:
    """What `gc --dest` removes: every toolchain dir but the current one, and what a flat hydrate of an
    older release listed in its state file. Anything cachekeeper did not place is never named."""
    layout = read_layout(dest) if dest.is_dir() else None
    if layout is None:
        return []
    out = [Reclaimable(p, _size(p), f"toolchain {p.name}") for p in sorted(dest.iterdir())
           if p.name not in (STATE_DIR, layout.current) and p.is_dir() and not p.is_symlink()
           and (state_dir(p) / "state.json").exists()]
    flat = load_state(dest)
    if flat is not None:
        for key in sorted(flat.files):
            root, _, rel = key.partition("/")
            if root == "cache" and not rel.startswith(tuple(o.path.name + "/" for o in out)):
                path = dest / rel
                if path.is_file() and not path.is_symlink() and path.parts[len(dest.parts)] != layout.current:
                    out.append(Reclaimable(path, path.lstat().st_size, "layout 1"))
    return out


def reclaim(dest: Path, items: list[Reclaimable]) -> list[Reclaimable]:
    """Remove what `reclaimable` named; what was removed. A toolchain dir a hydrate or capture is writing
    (its lock is held) is skipped, not waited for. Dirs leave the dest by a rename under the dest lock;
    the slow delete happens after it is released, so a booting hydrate never waits for it."""
    done: list[Reclaimable] = []
    trash: list[Path] = []
    with FileLock(state_dir(dest) / "lock", timeout=10.0):
        for item in items:
            if item.why == "layout 1":
                item.path.unlink(missing_ok=True)
                done.append(item)
                continue
            try:
                with FileLock(state_dir(item.path) / "lock", timeout=0.0):
                    trash.append(state_dir(dest) / f"reclaim-{item.path.name}")
                    os.rename(item.path, trash[-1])   # gone from the dest at once
            except LockBusy:
                continue
            done.append(item)
        # A layout-1 state file left beside layout.json lists the flat files just removed. A dest with no
        # layout.json is itself a toolchain's dir (hydrated through the library): its state stays.
        if read_layout(dest) is not None and load_state(dest) is not None \
                and all(i in done for i in items if i.why == "layout 1"):
            (state_dir(dest) / "state.json").unlink(missing_ok=True)
    for path in trash:
        shutil.rmtree(path, ignore_errors=True)
    return done
