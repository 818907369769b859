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
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from ..errors import DestinationError, DestStateError, LockBusy
from ..fs.atomic import atomic_write_bytes
from ..fs.paths import ensure_dir, new_tag
from .state import STATE_DIR, NotARecord, load_state, own_records_dir, plain_file, read_own, records_lock, state_dir

LAYOUT_FILE = "layout.json"
LAYOUT_VERSION = 2          # 1: the flat layout (files and state.json directly in the dest)
LAYOUT_NAME = "per-toolchain"
_FP_ID = re.compile(r"[0-9a-f]{16}\Z")


def is_fingerprint_id(name: object) -> bool:
    """A toolchain dir's name: a fingerprint id (16 hex digits), never a path."""
    return isinstance(name, str) and bool(_FP_ID.match(name))


def toolchain_dir(dest: Path, fingerprint_id: str) -> Path:
    """The dir a toolchain's files live in, and the one the runtime's env var names."""
    return dest / fingerprint_id


@dataclass(frozen=True)
class Layout:
    current: str = ""       # the fingerprint id the last hydrate of this dest was for
    backend: str = ""


def _parse_layout(dest: Path) -> Layout | str | None:
    """The layout; None when there is no layout.json; a str saying why it is malformed (what hydrate
    rewrites). Unreadable, or of another version: DestStateError (never guessed at, never rewritten)."""
    path = state_dir(dest) / LAYOUT_FILE
    try:
        raw = read_own(path, 1 << 20)
    except FileNotFoundError:
        return None
    except NotARecord as exc:
        return f"{path} is {exc}"
    except OSError as exc:
        raise DestStateError(f"cannot read {path}: {exc.strerror or exc}", path=str(path)) from None
    try:
        d = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        return f"{path} is not JSON ({str(exc)[:60]})"
    v = d.get("v") if isinstance(d, dict) else None
    if isinstance(v, int) and not isinstance(v, bool) and v != LAYOUT_VERSION:
        raise DestStateError(f"{dest} has dest layout version {v}; this release reads version {LAYOUT_VERSION}",
                             "use the cachekeeper release that hydrated it, or a fresh destination", path=str(dest))
    if not isinstance(d, dict) or v != LAYOUT_VERSION:
        return f"{path} is not a dest layout (no version {LAYOUT_VERSION} object)"
    if not is_fingerprint_id(d.get("current")):
        return f"{path} names no current toolchain (current: {str(d.get('current'))[:40]!r})"
    if not isinstance(d.get("backend", ""), str):
        return f"{path} names no backend"
    return Layout(d["current"], d.get("backend", ""))


def read_layout(dest: Path) -> Layout | None:
    """None when `dest` is not a per-toolchain dest (never hydrated, or flat from an older release); a
    layout.json that is unreadable, malformed, of another version, or names no current toolchain is
    one DestStateError: nothing that reads it guesses which toolchain is live."""
    layout = _parse_layout(dest)
    if isinstance(layout, str):
        raise DestStateError(layout, "hydrate the dest again (it rewrites layout.json for this host's toolchain)",
                             path=str(state_dir(dest) / LAYOUT_FILE))
    return layout


def _is_ours(entry: Path) -> bool:
    """The dest's records, or a toolchain dir (a directory named by a fingerprint id)."""
    return entry.name == STATE_DIR or (is_fingerprint_id(entry.name) and not entry.is_symlink() and entry.is_dir())


def claim_layout(dest: Path, fingerprint_id: str, backend: str, *, lock_timeout: float,
                 warnings: list[str] | None = None) -> Path:
    """Mark `dest` as per-toolchain with `fingerprint_id` current; the toolchain's dir (not yet created:
    the hydrate creates it once it has something to place). A malformed layout.json (or a lost one, in a
    dest that holds toolchain dirs) is rewritten, with one line in `warnings`."""
    ensure_dir(dest)
    own_records_dir(dest)
    if not os.access(dest, os.W_OK):
        raise DestinationError(f"destination {dest} is not writable", path=str(dest))
    with records_lock(dest, timeout=lock_timeout):
        layout = _parse_layout(dest)
        if isinstance(layout, str):
            if warnings is not None:
                warnings.append(f"{layout}; rewritten with toolchain {fingerprint_id} as current")
            layout = None
            path = state_dir(dest) / LAYOUT_FILE
            if path.is_dir() and not path.is_symlink():   # ours to replace: a rename cannot go over it
                shutil.rmtree(path, ignore_errors=True)
        elif layout is None and not os.path.lexists(state_dir(dest) / "state.json") \
                and not all(_is_ours(p) for p in dest.iterdir()):
            raise DestinationError(f"{dest} already holds files cachekeeper did not place",
                                   "hydrate into an empty directory (or one cachekeeper hydrated)", path=str(dest))
        if layout != Layout(fingerprint_id, backend):
            doc = {"v": LAYOUT_VERSION, "layout": LAYOUT_NAME, "current": fingerprint_id, "backend": backend}
            atomic_write_bytes(state_dir(dest) / LAYOUT_FILE, json.dumps(doc, sort_keys=True).encode())
    return toolchain_dir(dest, fingerprint_id)


def _has_layout(path: Path) -> bool:
    return os.path.lexists(state_dir(path) / LAYOUT_FILE)


def _names_itself(path: Path) -> bool:
    """A toolchain dir whose dest lost its layout.json: its own state names its dir's toolchain."""
    try:
        state = load_state(path) if is_fingerprint_id(path.name) else None
    except DestinationError:
        return False
    return state is not None and state.fingerprint_id == path.name


def resolve_dest(path: Path) -> Path:
    """The dest a path names, for every command that takes one: the path itself, or, for a toolchain dir
    (`<dest>/<fp>`: what the env, `hydrate --json` and `report.dest` name), its dest. A path inside a
    dest's records or deeper inside a toolchain dir names no dest: exit 9."""
    path = Path(os.path.abspath(path))
    if STATE_DIR in path.parts:
        raise DestinationError(f"{path} is inside cachekeeper's own records ({STATE_DIR}/), not a dest",
                               "pass the dest itself: the dir that holds layout.json and the toolchain dirs",
                               path=str(path))
    if _has_layout(path):
        return path
    if is_fingerprint_id(path.name) and (_has_layout(path.parent) or _names_itself(path)):
        return path.parent
    for up in path.parents:
        if _has_layout(up) or (is_fingerprint_id(up.name) and _has_layout(up.parent)):
            raise DestinationError(f"{path} is inside the hydrated dest {up}, not a dest",
                                   f"pass the dest itself ({up if _has_layout(up) else up.parent})", path=str(path))
    return path


def served_dir(dest: Path, fingerprint_id: str | None = None) -> Path:
    """The dir a command that reads a hydrated dest (capture, gc's budget) should look at:
    `fingerprint_id`'s dir, else the current one's; a flat (layout 1) dest is itself. `dest` may be
    the dest or one of its toolchain dirs (`resolve_dest`)."""
    dest = resolve_dest(dest)
    if not dest.is_dir():
        return dest
    if fingerprint_id and is_fingerprint_id(fingerprint_id):
        mine = toolchain_dir(dest, fingerprint_id)
        if mine.is_dir() and not mine.is_symlink():
            return mine
    layout = read_layout(dest)
    if layout is None:
        return dest
    return toolchain_dir(dest, layout.current)


def backend_of(dest: Path, *, needed: bool = True) -> str | None:
    """The backend the dest (or toolchain dir) was last hydrated for: layout.json's, else a flat dest's
    state's; None when neither says (the caller asks for --backend or a config). A layout.json that
    cannot say is its one error when `needed` (nothing else names the backend), else None."""
    dest = resolve_dest(dest)
    try:
        layout = read_layout(dest) if dest.is_dir() else None
    except DestinationError:
        if needed:
            raise
        return None
    if layout is not None and layout.backend:
        return layout.backend
    state = load_state(dest) if dest.is_dir() else None
    return state.backend if state is not None and state.backend else None


@dataclass(frozen=True)
class Reclaimable:
    path: Path           # a toolchain dir, or one flat file of a layout-1 hydrate
    bytes: int
    why: str             # "toolchain <id>" or "layout 1"


def _size(path: Path) -> int:
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    return sum(f.lstat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def current_dir(dest: Path) -> Path:
    """The live toolchain dir of a per-toolchain dest, proven: layout.json names a fingerprint id and that
    dir exists. Anything else is one DestStateError, and gc deletes nothing."""
    layout = read_layout(dest)
    if layout is None:
        raise DestStateError(f"{dest} has no {STATE_DIR}/{LAYOUT_FILE}", path=str(dest))
    live = toolchain_dir(dest, layout.current)
    if live.is_symlink() or not live.is_dir():
        raise DestStateError(f"{state_dir(dest) / LAYOUT_FILE} names toolchain {layout.current} as current, and "
                             f"{live} is no directory; gc removes nothing it cannot prove is not live",
                             "hydrate the dest again (it rewrites layout.json), then run gc", path=str(dest))
    return live


def reclaimable(dest: Path) -> list[Reclaimable]:
    """What `gc --dest` removes: every toolchain dir but the current one, and what a flat hydrate of an
    older release listed in its state file. Anything cachekeeper did not place is never named, and
    nothing is named unless the current toolchain's dir is proven (`current_dir`)."""
    if not dest.is_dir() or read_layout(dest) is None:
        return []
    live = current_dir(dest)
    out = [Reclaimable(p, _size(p), f"toolchain {p.name}") for p in sorted(dest.iterdir())
           if is_fingerprint_id(p.name) and p.name != live.name and p.is_dir() and not p.is_symlink()
           and os.path.lexists(state_dir(p) / "state.json")]
    flat = load_state(dest)
    if flat is not None:
        for key in sorted(flat.files):
            root, _, rel = key.partition("/")
            first = rel.split("/")[0]
            if root != "cache" or first in (STATE_DIR, live.name) or first in {o.path.name for o in out}:
                continue
            path = plain_file(dest, rel)
            if path is not None:
                out.append(Reclaimable(path, path.lstat().st_size, "layout 1"))
    return out


def reclaim(dest: Path, items: list[Reclaimable]) -> list[Reclaimable]:
    """Remove what `reclaimable` named; what was removed. A toolchain dir a hydrate or capture is writing
    (its lock is held) is skipped, not waited for, and so is whatever is current by the time the dest lock
    is held. Dirs leave the dest by a rename under the dest lock; the slow delete happens after it is
    released, so a booting hydrate never waits for it."""
    done: list[Reclaimable] = []
    trash: list[Path] = []
    with records_lock(dest, timeout=10.0):
        live = current_dir(dest).name if items else ""   # again, under the lock: a hydrate may have switched
        for item in items:
            if item.path.relative_to(dest).parts[0] == live:
                continue
            if item.why == "layout 1":
                item.path.unlink(missing_ok=True)
                done.append(item)
                continue
            try:
                with records_lock(item.path, timeout=0.0):
                    trash.append(state_dir(dest) / f"reclaim-{item.path.name}-{new_tag()}")
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
