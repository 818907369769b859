"""The traffic view `stats --traffic` and the dashboard show: per toolchain, the shapes serving hosts met
that no prebuilt entry covers (from miss reports), with calls, hosts that compiled and compile time.

Prebuilt means an entry of that toolchain and model at that height and width, with the batch as served
or doubled (classifier-free guidance compiles 2 x the images per prompt). Reads the store's reports/
and the catalog's entries; no torch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..format.spec import Shape
from ..reports.miss import RECENT_S, read_reports, serving_batches, since_stamp
from .suggest import served_not_prebuilt

if TYPE_CHECKING:
    from ..catalog.rows import CatalogRow
    from ..stores.base import Store

def prebuilt_shapes(rows: Iterable[CatalogRow]) -> set[tuple[str, str, int, int, int]]:
    """(fingerprint id, model, height, width, batch) of every entry the catalog lists."""
    return {(r.fingerprint_id, r.model, r.height, r.width, r.batch) for r in rows
            if r.model is not None and r.height is not None and r.width is not None and r.batch is not None}


def traffic(store: Store, entries: set[tuple[str, str, int, int, int]],
            since_s: float = RECENT_S) -> dict[str, Any]:
    """{"toolchains": {fp: [suggestion dicts, most costly first]}, "reports": n, "skipped": [lines]}."""
    reports, skipped = read_reports(store, None, since_stamp(since_s))

    def prebuilt(fp: str, model: str, shape: Shape) -> bool:
        return any((fp, model, shape.height, shape.width, b) in entries for b in serving_batches(shape.batch))

    table: dict[str, list[dict[str, object]]] = {}
    for s in served_not_prebuilt(reports, prebuilt):
        table.setdefault(s.fingerprint_id, []).append(s.to_dict())
    return {"toolchains": table, "reports": len(reports), "skipped": skipped}


__all__ = ["prebuilt_shapes", "traffic"]
