"""The order xdist hands out test files in: the heavy files (any test marked `torch`: real compiles in
subprocesses, minutes each on 2 cores) first, in collection order, then the rest, most tests first (xdist's
own order for them).

Why: with `--dist loadfile` (scripts/test) a file runs on one worker. xdist's default (`--loadscope-reorder`)
sends the files with the most tests first, so the torch files, a few tests each but most of the suite's CPU
time, came last; the run then ended on one worker compiling alone while the other idled (seen on 2 busy
cores: the last 3 minutes of a full run were tests/test_inductor_loop.py by itself). Heaviest first is the
usual longest-job-first schedule: the short files fill in around the long ones.

Only the order of whole files changes, never the order of tests inside a file, and only on xdist workers
(`-n 0` runs in collection order, as before).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

HEAVY_MARK = "torch"


def heavy_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """`items`, their files reordered: files with a `torch` test first, then the others by test count
    (descending); stable, so ties keep collection order and each file's tests keep theirs."""
    files: dict[Path, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.path, []).append(item)
    heavy = {path for path, its in files.items() if any(i.get_closest_marker(HEAVY_MARK) for i in its)}
    ordered = sorted(files, key=lambda path: (path not in heavy, 0 if path in heavy else -len(files[path])))
    return [item for path in ordered for item in files[path]]


def pytest_configure(config: pytest.Config) -> None:
    # The order below is the schedule: keep xdist from re-sorting files by test count.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items[:] = heavy_first(items)
