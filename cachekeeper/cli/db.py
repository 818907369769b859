"""`cachekeeper db upgrade|downgrade|current` and `cachekeeper catalog rebuild`.

SQLAlchemy, Alembic and store SDKs are imported inside the commands, so other commands stay fast.
Errors are `CachekeeperError`s left for the main group to print with their hint.
"""

from __future__ import annotations

import click

_catalog_option = click.option(
    "--catalog", "catalog_url", metavar="URL", envvar="CACHEKEEPER_CATALOG", default=None,
    help="Catalog database (default: sqlite:///$CACHEKEEPER_HOME/catalog.db).")


@click.group()
def db() -> None:
    """Migrate the catalog database's schema."""


@db.command()
@click.argument("revision", default="head")
@_catalog_option
def upgrade(revision: str, catalog_url: str | None) -> None:
    """Migrate the catalog up to REVISION (default: head)."""
    from ..catalog import Catalog

    with Catalog.connect(catalog_url) as catalog:
        catalog.upgrade(revision)
        click.echo(f"{catalog.url}: at revision {_describe(catalog.current())}")


@db.command()
@click.argument("revision")
@_catalog_option
def downgrade(revision: str, catalog_url: str | None) -> None:
    """Migrate the catalog down to REVISION ("base" drops every catalog table)."""
    from ..catalog import Catalog

    with Catalog.connect(catalog_url) as catalog:
        catalog.downgrade(revision)
        click.echo(f"{catalog.url}: at revision {_describe(catalog.current())}")


@db.command()
@_catalog_option
def current(catalog_url: str | None) -> None:
    """Print the catalog's schema revision."""
    from ..catalog import Catalog

    with Catalog.connect(catalog_url) as catalog:
        click.echo(_describe(catalog.current()))


def _describe(revision: str | None) -> str:
    from ..catalog.db import head

    if revision is None:
        return "none (run `cachekeeper db upgrade`)"
    return f"{revision} (head)" if revision == head() else revision


@click.group("catalog")
def catalog_group() -> None:
    """Maintain the catalog index of published manifests."""


@catalog_group.command()
@_catalog_option
@click.option("--store", "store_url", metavar="URL", envvar="CACHEKEEPER_STORE", default=None,
              help="Store whose manifests to index (default: $CACHEKEEPER_HOME/store).")
def rebuild(catalog_url: str | None, store_url: str | None) -> None:
    """Re-index every manifest in the store; drop rows whose manifest is gone."""
    from ..catalog import Catalog
    from ..stores import open_store

    store = open_store(store_url, create=False)
    try:
        with Catalog.open(catalog_url) as catalog:
            report = catalog.rebuild(store)
    finally:
        store.close()
    for key, why in report.invalid:
        click.echo(f"warning: {key}: {why}", err=True)
    click.echo(f"{catalog.url}: {len(report.added)} added, {len(report.removed)} removed, "
               f"{report.unchanged} unchanged, {len(report.invalid)} invalid")


catalog = catalog_group   # `cli.add_command(catalog)` reads naturally in cli/__init__.py
