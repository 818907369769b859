"""The one logger of the CLI's stderr: `error:` and `hint:` lines, `warning:` lines, progress lines and
each command's summary, in one of two formats.

    human (the default)   error: <message>         warning: <message>       hydrate: 3 files ... (0.12s)
                          hint: <next step>
    json                  one object per line: {"event": "error", "level": "error", "message": ...,
                          <the error's subject fields: key, url, path, fingerprint>, "hint": ..., "exit_code": 3}

A JSON line carries the same fields in every event: `event` (error, warning, progress, summary), `level`
(error, warning, info), `message` (the human line's text without its prefix) and, for a summary, the
command's `--json`-style figures. Chosen once per process by `--log-format` or CACHEKEEPER_LOG_FORMAT.

Light (the stdlib and the settings registry): the boot path prints through it.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

from ..settings import LOG_FORMAT

FORMATS = LOG_FORMAT.choices

_format = "human"


def configure(fmt: str) -> None:
    """Choose the format for the rest of the process (the CLI checks the value first: unknown is exit 2)."""
    global _format
    if fmt not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; choose one of {', '.join(FORMATS)}")
    _format = fmt


def current() -> str:
    return _format


def _stream() -> TextIO:
    return sys.stderr


def _write(line: str) -> None:
    stream = _stream()
    stream.write(line + "\n")
    stream.flush()


def event(kind: str, level: str, message: str, *, human: str | None = None, **fields: Any) -> None:
    """One event. `human`: the line the human format prints (default: the message as is)."""
    if _format == "json":
        doc: dict[str, Any] = {"event": kind, "level": level, "message": message, "time": round(time.time(), 3)}
        doc.update(fields)
        _write(json.dumps(doc, default=str))
    else:
        _write(message if human is None else human)


def error(message: str, hint: str = "", *, exit_code: int | None = None, **subject: Any) -> None:
    """An `error:` line and its `hint:` line (one JSON object carrying both)."""
    if _format == "json":
        extra: dict[str, Any] = {k: v for k, v in (("hint", hint), ("exit_code", exit_code)) if v}
        event("error", "error", message, **extra, **subject)
        return
    _write(f"error: {message}")
    if hint:
        _write(f"hint: {hint}")


def warning(message: str, **fields: Any) -> None:
    event("warning", "warning", message, human=f"warning: {message}", **fields)


def progress(message: str, **fields: Any) -> None:
    """A line a command prints while it works (prebuild's per-entry lines, report rounds, ...)."""
    event("progress", "info", message, **fields)


def summary(message: str, **fields: Any) -> None:
    """A command's closing line; `fields` are the figures its `--json` summary carries."""
    event("summary", "info", message, **fields)


def line(text: str) -> None:
    """A human stderr line of the CLI: `warning: ...` lines become warning events, the rest progress."""
    if text.startswith("warning: "):
        warning(text[len("warning: "):])
    elif text.startswith("error: "):
        error(text[len("error: "):])
    else:
        progress(text)
