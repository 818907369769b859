"""What the built-in cloud stores promise about imports: a file store never loads their SDKs."""

from __future__ import annotations

import subprocess
import sys


def assert_opening_is_lazy(url: str, module: str, message: str) -> None:
    """In a fresh interpreter: a file store never imports `module` (the cloud SDK); opening `url` does."""
    code = ("import sys, tempfile; from cachekeeper.stores import open_store; "
            "open_store(tempfile.mkdtemp()).put_bytes('k', b'v'); "
            f"assert {module!r} not in sys.modules, {message!r}; "
            f"open_store({url!r}); assert {module!r} in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
