"""Alembic scripts for the catalog, shipped inside the wheel as `cachekeeper._migrations`."""
