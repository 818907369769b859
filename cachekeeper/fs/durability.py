"""What a hydrate's "in place" promises after a crash or a power loss, and what it costs on the boot path.

    fsync   every file (and its directory entry) is fsynced before the state file names it: the state
            file is trusted across reboots (size + mtime). Pays a disk round trip per file on the boot path.
    boot    no per-file fsync; the state file records the boot id and the filesystem, and is trusted only
            within the boot that wrote it. After a reboot every listed file is re-verified (size, then
            digest) before it is called in place, which a power loss requires anyway. The default.
    both    fsync, and still re-verify after a reboot (for filesystems whose fsync is not to be trusted).

docs/durability.md says what each promises. Light: stdlib only, read on the no-op path.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Literal

Durability = Literal["fsync", "boot", "both"]
MODES: tuple[Durability, ...] = ("fsync", "boot", "both")
DEFAULT: Durability = "boot"
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
# Filesystems one node cannot lock for another (flock is node-local or advisory-only there) or that
# several nodes mount at once: a node cache on one of them is refused (hydration/nodecache.py).
NETWORK_FS = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "9p", "afs",
                        "gfs2", "ocfs2", "beegfs", "gpfs", "fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse",
                        "fuse.juicefs", "fuse.goofys", "fuse.mountpoint-s3", "fuse.glusterfs", "fuse.rclone"})


def fsyncs(mode: Durability) -> bool:
    return mode != "boot"


def boot_bound(mode: Durability) -> bool:
    """A state file written in this mode is trusted only within the boot that wrote it."""
    return mode != "fsync"


@functools.cache
def boot_id() -> str:
    """This kernel boot's random id ("" where the kernel does not say: then nothing is boot-bound-trusted)."""
    try:
        return Path(BOOT_ID_PATH).read_text().strip()
    except OSError:
        return ""


def filesystem(path: Path) -> str:
    """`<fstype>:<st_dev>` of the filesystem holding `path`: a state file written on one filesystem says
    nothing about another one mounted at the same place later."""
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return ""
    return f"{fs_type(path)}:{dev}"


def fs_type(path: Path) -> str:
    """The filesystem type of the mount holding `path` (from /proc/self/mountinfo; "" if unknown)."""
    real = os.path.realpath(path)
    best, kind = "", ""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5:
            continue
        mount = fields[4].replace("\\040", " ")
        inside = real == mount or real.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, right.split()[0]
    return kind
