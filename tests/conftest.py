"""Shared fixtures. Real servers are started lazily (first test that asks) and stopped at session end.

Each harness module owns one server: tests/harness/postgres.py, seaweedfs.py, fakegcs.py. The tiny models,
and one prebuild of examples/tiny.yaml, are built once per run, across xdist workers, and shared:
tests/harness/tiny.py.

Under pytest-xdist the test files are handed out heaviest first (tests/harness/order.py): the few files
that compile with torch in subprocesses hold most of the suite's CPU time in a handful of tests, and
xdist's own order (most tests first) left them for last, with one worker compiling while the other idled.
"""

from __future__ import annotations

pytest_plugins = [
    "tests.harness.postgres",
    "tests.harness.seaweedfs",
    "tests.harness.fakegcs",
    "tests.harness.tiny",
    "tests.harness.order",
    "tests.harness.signals",
]
