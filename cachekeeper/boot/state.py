"""The hydrate state file: what cachekeeper placed in a destination, so a repeat run is a stat() walk.

Lives at `<dest>/.cachekeeper/state.json`, written last (atomically) after every file is in place. It
records the toolchain of the directory: one directory holds one toolchain, never a mix.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DestinationError
from ..fs.atomic import atomic_write_bytes

STATE_DIR = ".cachekeeper"
STATE_VERSION = 1


def state_dir(dest: Path) -> Path:
    return dest / STATE_DIR


@dataclass(frozen=True)
class PlacedFile:
    sha256: str
    size: int
    mtime_ns: int


@dataclass
class State:
    fingerprint_id: str = ""
    backend: str = ""
    manifests: dict[str, str] = field(default_factory=dict)       # manifest name -> digest
    files: dict[str, PlacedFile] = field(default_factory=dict)    # "root/path" -> what we placed
    roots: dict[str, str] = field(default_factory=dict)           # root name -> absolute dir
    signed: dict[str, list[str]] = field(default_factory=dict)    # manifest name -> trusted key ids it passed

    def to_json(self) -> bytes:
        return json.dumps({
            "v": STATE_VERSION, "fingerprint_id": self.fingerprint_id, "backend": self.backend,
            "manifests": self.manifests, "roots": self.roots, "signed": self.signed,
            "files": {k: [f.sha256, f.size, f.mtime_ns] for k, f in sorted(self.files.items())},
        }, sort_keys=True).encode()


def file_key(root: str, path: str) -> str:
    return f"{root}/{path}"


def load_state(dest: Path) -> State | None:
    """None when the destination was never hydrated (or its state is unreadable: then we re-verify)."""
    try:
        d = json.loads((state_dir(dest) / "state.json").read_bytes())
        if d.get("v") != STATE_VERSION:
            return None
        return State(
            fingerprint_id=d["fingerprint_id"], backend=d["backend"], manifests=dict(d["manifests"]),
            roots=dict(d.get("roots", {})), signed={k: list(v) for k, v in d.get("signed", {}).items()},
            files={k: PlacedFile(str(v[0]), int(v[1]), int(v[2])) for k, v in d["files"].items()},
        )
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, IndexError):
        return None
    except OSError as exc:
        raise DestinationError(f"cannot read hydrate state in {dest}: {exc.strerror}") from None


def save_state(dest: Path, state: State) -> None:
    atomic_write_bytes(state_dir(dest) / "state.json", state.to_json())


def stat_matches(path: Path, placed: PlacedFile) -> bool:
    try:
        st = os.lstat(path)  # a symlink swapped in for a placed file never matches
    except OSError:
        return False
    return st.st_size == placed.size and st.st_mtime_ns == placed.mtime_ns and stat.S_ISREG(st.st_mode)
