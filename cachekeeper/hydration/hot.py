"""Hot first: the order a hydrate places entries in, so that `--ready-after N` marks the server ready once
the N entries it is most likely to be asked for are in place.

    config `priority:` (higher first) ─▶ calls served, from this toolchain's recent miss reports (more
    first) ─▶ last use in this dest (`<dest>/.cachekeeper/used/`, newer first) ─▶ the config's order

`order` is pure. Reports are advice from serving hosts (reports/miss.py): only the newest `limit` of this
toolchain within `window` are read, each under its size bound, and a store that cannot list or read them
leaves them out with one warning line (`read_calls`). They reorder the wanted entries, never add or drop one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from ..errors import CachekeeperError
from ..format.spool import show
from ..reports.miss import RECENT_S, read_reports, serving_batches, since_stamp

if TYPE_CHECKING:
    from ..reports.miss import Row
    from ..stores.base import Store

ShapeKey = tuple[str, int, int, int]   # (model, height, width, batch): what a report row counts calls of
BUDGET = 2.0                           # seconds the reports may take before the first entry starts


def order(names: Sequence[str], priority: Mapping[str, int], calls: Mapping[str, int],
          used: Mapping[str, float]) -> list[str]:
    """`names` hottest first: by priority, then calls, then last use; ties keep the given order."""
    index = {n: i for i, n in enumerate(names)}
    return sorted(names, key=lambda n: (-priority.get(n, 0), -calls.get(n, 0), -used.get(n, 0.0), index[n]))


def calls_by_entry(rows: Iterable[Row], shapes: Mapping[str, ShapeKey]) -> dict[str, int]:
    """Calls each entry served: those of its shape, or of half its batch where guidance doubled it
    (`reports.serving_batches`); every entry of one shape gets that shape's calls."""
    per_shape: dict[ShapeKey, int] = {}
    for r in rows:
        for batch in serving_batches(r.batch):
            key = (r.model, r.height, r.width, batch)
            per_shape[key] = per_shape.get(key, 0) + r.calls
    return {name: per_shape[k] for name, k in shapes.items() if k in per_shape}


def read_calls(open_store: Callable[[], Store], fingerprint_id: str, shapes: Mapping[str, ShapeKey], limit: int,
               window: float = RECENT_S, budget: float = BUDGET, now: float | None = None) \
        -> tuple[dict[str, int], list[str]]:
    """(calls per entry in the newest `limit` reports of this toolchain within `window`, at most one warning
    line). Advice from serving hosts, so it never fails the hydrate and never holds it past `budget` seconds
    (a dead store): reports that are unreadable are left out, and with none left the config's order stands.
    The store `open_store` gives is the caller's to close: the hydrate that follows reuses it."""
    from ..stores.reader import Deadline

    if limit <= 0 or not shapes:
        return {}, []

    def read() -> tuple[dict[str, int], list[str]]:
        reports, skipped = read_reports(open_store(), fingerprint_id, since_stamp(window, now), newest=limit)
        calls = calls_by_entry((r for rep in reports for r in rep.rows), shapes)
        if not skipped:
            return calls, []
        rest = (f"the other {len(reports)} order the entries" if reports
                else "entries go in the config's priority order")
        more = f" and {len(skipped) - 1} more" if len(skipped) > 1 else ""
        return calls, [f"hot first: {len(skipped)} of {len(skipped) + len(reports)} miss reports skipped "
                       f"({skipped[0]}{more}); {rest}"]

    try:
        return Deadline(budget).run(read, "reading miss reports")
    except CachekeeperError as exc:
        why = exc.message
    except (ArithmeticError, LookupError, RecursionError, TypeError, ValueError, OSError) as exc:
        # What reading untrusted data could still raise that the checks in reports.py did not foresee: advice,
        # so the boot goes on in the config's order (and the line says what to report as a bug).
        why = f"{type(exc).__name__}: {show(str(exc), 160)}"
    return {}, [f"hot first: miss reports not read ({why}); entries go in the config's priority order"]
