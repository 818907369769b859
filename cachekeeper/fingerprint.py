"""Deprecated: `Fingerprint` moved to `cachekeeper.format.fingerprint`; plugins import it from the backend
contract, `cachekeeper.backends.base`. This module keeps plugins written against the old contract loading
for one release (it warns on import) and goes in the next. It is the only such shim."""

from __future__ import annotations

import warnings

from .format.fingerprint import FINGERPRINT_VERSION, Fingerprint

__all__ = ["FINGERPRINT_VERSION", "Fingerprint"]

warnings.warn("cachekeeper.fingerprint is deprecated and goes in the next release: "
              "import Fingerprint from cachekeeper.backends.base", DeprecationWarning, stacklevel=2)
