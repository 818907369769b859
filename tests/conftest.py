"""Shared fixtures. Real servers are started lazily (first test that asks) and stopped at session end.

Each harness module owns one server: tests/harness/postgres.py, seaweedfs.py, fakegcs.py.
"""

from __future__ import annotations

pytest_plugins = [
    "tests.harness.postgres",
    "tests.harness.seaweedfs",
    "tests.harness.fakegcs",
]
