"""What `cachekeeper hydrate` prints on stderr while it runs and when it ends.

On a terminal: a progress line (only for hydrates longer than a second), then one human line. Otherwise
(boot logs, CI): one JSON summary line a log pipeline can parse. stdout stays for `--print-env`/`--json`.
With `--log-format json` both are events of the one logger (observability/logs.py): a progress event every
few seconds and a summary event carrying the same figures.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..observability import logs

if TYPE_CHECKING:
    from ..hydration.engine import HydrateReport
    from ..hydration.fetch import FetchStats

MiB = 1 << 20
SHOW_AFTER = 1.0     # seconds: a fast hydrate prints no progress at all
EVERY = 0.2
EVERY_EVENT = 5.0    # seconds between progress events in the JSON log format


def _tty() -> bool:
    return sys.stderr.isatty()


def progress_line(tty: Callable[[], bool] = _tty) -> Callable[[FetchStats], None] | None:
    if logs.current() == "json":
        return _progress_events()
    if not tty():
        return None
    t0 = time.monotonic()
    last = [0.0]

    def show(stats: FetchStats) -> None:
        now = time.monotonic()
        if now - t0 < SHOW_AFTER or now - last[0] < EVERY:
            return
        last[0] = now
        rate = stats.bytes_received / MiB / (now - t0)
        sys.stderr.write(f"\rhydrate: {stats.files}/{stats.files_planned} files, "
                         f"{stats.bytes_received / MiB:.0f}/{stats.bytes_planned / MiB:.0f} MiB, {rate:.0f} MiB/s"
                         + (f", {stats.retries} retries" if stats.retries else "") + "   ")
        sys.stderr.flush()
        progress_line.shown = True  # type: ignore[attr-defined]

    return show


def _progress_events() -> Callable[[FetchStats], None]:
    t0 = time.monotonic()
    last = [t0]

    def show(stats: FetchStats) -> None:
        now = time.monotonic()
        if now - t0 < SHOW_AFTER or now - last[0] < EVERY_EVENT:
            return
        last[0] = now
        logs.progress(f"hydrate: {stats.files}/{stats.files_planned} files, "
                      f"{stats.bytes_received / MiB:.0f}/{stats.bytes_planned / MiB:.0f} MiB",
                      command="hydrate", files=stats.files, files_planned=stats.files_planned,
                      bytes=stats.bytes_received, bytes_planned=stats.bytes_planned, retries=stats.retries)

    return show


def summary(report: HydrateReport) -> dict[str, object]:
    seconds = max(report.seconds, 1e-9)
    return {"hydrate": "noop" if report.noop else "incomplete" if report.incomplete else "done",
            "files": report.files_fetched, "bytes": report.bytes_fetched, "seconds": round(report.seconds, 3),
            "mib_s": round(report.bytes_fetched / MiB / seconds, 1), "retries": report.retries,
            "deadline_left": report.deadline_left, "in_place": report.files_total, "dest": str(report.dest),
            **_node_figures(report)}


def _node_figures(report: HydrateReport) -> dict[str, object]:
    """Only where they apply: a node cache, hot first, evictions (a plain hydrate's line is unchanged)."""
    out: dict[str, object] = {}
    if report.node_linked or report.node_copied or report.node_fetched_bytes:
        out.update(node_linked=report.node_linked, node_copied=report.node_copied,
                   node_fetched_bytes=report.node_fetched_bytes)
    if report.ready_seconds is not None:
        out["ready_seconds"] = round(report.ready_seconds, 3)
    if report.evicted:
        out["evicted"] = len(report.evicted)
    return out


def summarize(report: HydrateReport, tty: Callable[[], bool] = _tty) -> None:
    if logs.current() == "json":
        logs.summary(f"hydrate: {summary(report)['hydrate']} -> {report.dest} ({report.seconds:.2f}s)",
                     command="hydrate", **summary(report))
        return
    if not tty():
        sys.stderr.write(json.dumps(summary(report)) + "\n")
        return
    if getattr(progress_line, "shown", False):
        sys.stderr.write("\n")
    what = ("already in place" if report.noop else
            f"{report.files_fetched} files ({report.bytes_fetched / MiB:.1f} MiB) fetched, "
            f"{report.files_total} in place")
    sys.stderr.write(f"hydrate: {what} -> {report.dest} ({report.seconds:.2f}s)\n")
