"""The store tests. The conformance suite lives in the package (cachekeeper.testing.stores); pytest
rewrites asserts only in test modules unless told, and a failing contract check should show its values."""

import pytest

pytest.register_assert_rewrite("cachekeeper.testing.stores")
