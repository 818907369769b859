"""Fleet figures: how many wanted entries a host found prebuilt, missed, and got from captured sets.

Summed over a fleet (hydrate's `--json`, capture's report, `stats`), they say which shapes a team should
add to the prebuild config: every captured set is a runtime compile that no prebuilt entry covered.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..format.layout import is_captured_name

_ENTRY_KEY = re.compile(r"[0-9a-f]{32}")   # an entry is named by its spec key; shared sets "<root>-<hash>"


def hydrate_counts(manifests: Iterable[str], missing: Iterable[str]) -> dict[str, int]:
    """{"hit": prebuilt entries in place, "missed": wanted entries not built, "captured": captured sets applied}."""
    names = list(manifests)
    return {"hit": sum(1 for n in names if _ENTRY_KEY.fullmatch(n)), "missed": len(list(missing)),
            "captured": sum(1 for n in names if is_captured_name(n))}
