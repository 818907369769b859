"""Shared fixtures. Real servers are started lazily (first test that asks) and stopped at session end.

Each harness module owns one server: tests/harness/postgres.py, seaweedfs.py, fakegcs.py. The tiny models
are built once per run, across xdist workers, and shared: tests/harness/tiny.py.
"""

from __future__ import annotations

pytest_plugins = [
    "tests.harness.postgres",
    "tests.harness.seaweedfs",
    "tests.harness.fakegcs",
    "tests.harness.tiny",
]
