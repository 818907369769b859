"""Old import path, kept while store_admin.py (and any plugin) still imports from here: the commands moved
to build.py, boot.py, inspect.py and compare.py, and the shared options and resources to options.py."""

from __future__ import annotations

from .options import catalog_option, json_option, store_option
from .options import load_config as _load_config
from .options import open_catalog as _catalog
from .options import open_store as _store
from .options import say as _say

__all__ = ["_catalog", "_load_config", "_say", "_store", "catalog_option", "json_option", "store_option"]
