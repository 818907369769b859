"""The hydrate state file: what cachekeeper placed in a destination, so a repeat run is a stat() walk.

Lives at `<dest>/.cachekeeper/state.json`, written last (atomically) after every file is in place. It
records the toolchain of the directory: one directory holds one toolchain, never a mix.

Version 2 adds how it was made durable (`durability`), the boot that wrote it (`boot_id`) and the
filesystem it describes (`filesystem`): a boot-bound state file is trusted only within that boot and on
that filesystem (`trusted`), else every file it lists is re-verified. Version 1 files still load (they
were written with per-file fsyncs); a newer version is not read (the files are re-verified instead).
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
STATE_VERSION = 2
READABLE_VERSIONS = (1, 2)


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
    # Captured sets the store listed when this dest was last hydrated (applied or not): a no-op hydrate
    # lists the captured sets once and does the full run only when one is not here. Optional in the file.
    captured_seen: list[str] = field(default_factory=list)
    durability: str = "fsync"     # fsync | boot | both (boot/durability.py); v1 files were fsynced
    boot_id: str = ""             # the boot that wrote it
    filesystem: str = ""          # "<fstype>:<st_dev>" of the dest

    def to_json(self) -> bytes:
        return json.dumps({
            "v": STATE_VERSION, "fingerprint_id": self.fingerprint_id, "backend": self.backend,
            "manifests": self.manifests, "roots": self.roots, "signed": self.signed,
            "captured_seen": sorted(self.captured_seen),
            "files": {k: [f.sha256, f.size, f.mtime_ns] for k, f in sorted(self.files.items())},
            "durability": self.durability, "boot_id": self.boot_id, "filesystem": self.filesystem,
        }, sort_keys=True).encode()


def file_key(root: str, path: str) -> str:
    return f"{root}/{path}"


def load_state(dest: Path) -> State | None:
    """None when the destination was never hydrated (or its state is unreadable: then we re-verify)."""
    try:
        d = json.loads((state_dir(dest) / "state.json").read_bytes())
        if d.get("v") not in READABLE_VERSIONS:
            return None
        return State(
            fingerprint_id=d["fingerprint_id"], backend=d["backend"], manifests=dict(d["manifests"]),
            roots=dict(d.get("roots", {})), signed={k: list(v) for k, v in d.get("signed", {}).items()},
            captured_seen=[str(n) for n in d.get("captured_seen", ())],
            files={k: PlacedFile(str(v[0]), int(v[1]), int(v[2])) for k, v in d["files"].items()},
            durability=str(d.get("durability", "fsync")), boot_id=str(d.get("boot_id", "")),
            filesystem=str(d.get("filesystem", "")),
        )
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError, IndexError):
        return None
    except OSError as exc:
        raise DestinationError(f"cannot read hydrate state in {dest}: {exc.strerror}") from None


def trusted(state: State, dest: Path) -> bool:
    """May the sizes and mtimes this state lists stand for verified bytes now? A fsync-durable state
    always; a boot-bound one only within the boot that wrote it, on the filesystem it describes (after
    a power loss a listed file can hold zeros under its size and mtime)."""
    from .durability import boot_bound, boot_id, filesystem

    if not boot_bound(state.durability):  # type: ignore[arg-type]
        return True
    return bool(state.boot_id) and state.boot_id == boot_id() and state.filesystem == filesystem(dest)


def save_state(dest: Path, state: State) -> None:
    atomic_write_bytes(state_dir(dest) / "state.json", state.to_json())


def drop_state(dest: Path) -> None:
    """Unclaim `dest`: a run that placed nothing leaves no state naming its toolchain."""
    (state_dir(dest) / "state.json").unlink(missing_ok=True)


def stat_matches(path: Path, placed: PlacedFile) -> bool:
    try:
        st = os.lstat(path)  # a symlink swapped in for a placed file never matches
    except OSError:
        return False
    return st.st_size == placed.size and st.st_mtime_ns == placed.mtime_ns and stat.S_ISREG(st.st_mode)
