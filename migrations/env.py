"""Alembic environment. `cachekeeper.catalog.db.migrate` passes an open connection inside its own
transaction (and migration lock); offline mode (`--sql`) renders SQL from `sqlalchemy.url`."""

from __future__ import annotations

from alembic import context

from cachekeeper.catalog.db import VERSION_TABLE
from cachekeeper.catalog.models import Base

config = context.config
# render_as_batch: SQLite cannot ALTER most things; batch mode copies the table instead.
options = {"target_metadata": Base.metadata, "version_table": VERSION_TABLE, "render_as_batch": True,
           "compare_type": True}

if context.is_offline_mode():
    context.configure(url=config.get_main_option("sqlalchemy.url"), literal_binds=True, **options)
else:
    connection = config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("run migrations through `cachekeeper db upgrade` (it passes the connection)")
    context.configure(connection=connection, **options)

with context.begin_transaction():
    context.run_migrations()
