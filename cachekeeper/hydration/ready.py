"""Hot first: the markers that tell a server the first entries are in place, and later that all are.

    <dest>/.cachekeeper/ready      {"entries": [...], "complete": false}  the first N entries are placed
                                   and verified; the env (`env`) is written before it
    <dest>/.cachekeeper/complete   {"entries": [...]}                     every wanted entry is placed
    <dest>/.cachekeeper/env        the `export VAR=DIR` lines for the server (also `--env-file`)

The rest continue in the same hydrate process (a restartable native sidecar in Kubernetes, a
`Type=notify` unit in systemd: READY=1 goes to $NOTIFY_SOCKET with the ready marker). A server learns
that the rest arrived from `complete` (or the unit's STATUS); it need not: every file appears whole and
atomically, so a runtime that looks an artifact up when first needed finds the later ones by itself.
Both markers are removed when a hydrate starts, so a marker never speaks for an earlier run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path

from ..config.hydrate import ENV_FORMATS
from ..fs.atomic import atomic_write_bytes
from .state import COMPLETE_MARKER, READY_MARKER, state_dir

READY = READY_MARKER
COMPLETE = COMPLETE_MARKER
ENV = "env"


FORMATS = ENV_FORMATS


def render(exports: Mapping[str, str], fmt: str = "shell") -> str:
    """The env as a shell sources it (`export VAR=value`), or as a systemd `EnvironmentFile=`."""
    if fmt == "systemd":
        # EnvironmentFile= syntax: double quotes with backslash escapes; systemd never expands $ there.
        quoted = {k: '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for k, v in exports.items()}
        return "".join(f"{k}={v}\n" for k, v in sorted(quoted.items()))
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(exports.items()))


def clear(dest: Path) -> None:
    for name in (READY, COMPLETE):
        with contextlib.suppress(FileNotFoundError):
            (state_dir(dest) / name).unlink()


def mark(dest: Path, name: str, entries: list[str], env_text: str, env_file: Path | None) -> None:
    """The env first (a server that sees the marker can read it), then the marker, then systemd."""
    atomic_write_bytes(state_dir(dest) / ENV, env_text.encode())  # in --env-format
    if env_file is not None:
        atomic_write_bytes(env_file, env_text.encode())
    doc = {"entries": entries, "complete": name == COMPLETE}
    atomic_write_bytes(state_dir(dest) / name, json.dumps(doc, sort_keys=True).encode())
    notify("READY=1\nSTATUS=" + (f"all {len(entries)} entries in place" if name == COMPLETE
                                 else f"{len(entries)} hot entries in place; hydrating the rest"))


def notify(message: str) -> None:
    """sd_notify(3) without libsystemd: one datagram to $NOTIFY_SOCKET, if systemd gave one."""
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return
    import socket  # only under systemd: the no-op hydrate does not load it

    if addr.startswith("@"):
        addr = "\0" + addr[1:]
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.connect(addr)
        s.sendall(message.encode())
