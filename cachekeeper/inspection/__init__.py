"""Inspection for operators: what an upgrade invalidates (`diff`) and why a host misses (`explain`).

Pure planning lives here; the CLI (`cli/inspect.py`) and the dashboard fetch rows from the catalog
(`catalog/views.py`) or the store and hand them in. Nothing here imports SQLAlchemy: hydrate's `--json`
calls `explain.explain_misses` for its missed entries without a database.
"""
