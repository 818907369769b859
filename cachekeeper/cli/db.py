"""`cachekeeper db upgrade|downgrade|current` and `cachekeeper catalog rebuild`.

SQLAlchemy, Alembic and store SDKs are imported inside the commands, so other commands stay fast.
Errors are `CachekeeperError`s left for the main group to print with their hint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from .options import catalog_option, opened_store, say, store_option

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..catalog import Catalog


@click.group()
def db() -> None:
    """Migrate the catalog database's schema."""


@db.command()
@click.argument("revision", default="head")
@catalog_option
def upgrade(revision: str, catalog_url: str | None) -> None:
    """Migrate the catalog up to REVISION (default: head)."""
    _migrate(catalog_url, lambda catalog: catalog.upgrade(revision))


@db.command()
@click.argument("revision")
@catalog_option
def downgrade(revision: str, catalog_url: str | None) -> None:
    """Migrate the catalog down to REVISION ("base" drops every catalog table)."""
    _migrate(catalog_url, lambda catalog: catalog.downgrade(revision))


def _migrate(catalog_url: str | None, step: Callable[[Catalog], None]) -> None:
    """Connect at whatever revision the catalog is (Catalog.open would refuse or migrate), move, report."""
    from ..catalog import Catalog

    with Catalog.connect(catalog_url) as catalog:
        step(catalog)
        click.echo(f"{catalog.url}: at revision {_describe(catalog.current())}")


@db.command()
@catalog_option
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
@catalog_option
@store_option
def rebuild(catalog_url: str | None, store_url: str | None) -> None:
    """Re-index every manifest in the store; drop rows whose manifest is gone."""
    from ..catalog import Catalog

    with opened_store(store_url, None) as store, Catalog.open(catalog_url) as catalog:
        report = catalog.rebuild(store)
    for key, why in report.invalid:
        say(f"warning: {key}: {why}")
    click.echo(f"{catalog.url}: {len(report.added)} added, {len(report.removed)} removed, "
               f"{report.unchanged} unchanged, {len(report.invalid)} invalid")


catalog = catalog_group   # `cli.add_command(catalog)` reads naturally in cli/__init__.py
