"""What the commands share: the click options that name a store, a catalog or JSON output, and the
resources they open, as context managers, so a command closes every store and catalog it opened.

Light: click and the stdlib at import; configs, stores and catalogs are imported when a command opens one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

import click

from ..boot.request import HostToolchain, host_toolchain, load_config, pick_backend

if TYPE_CHECKING:
    from ..catalog import Catalog
    from ..config import Config
    from ..stores.base import Store

__all__ = ["backend_pairs", "catalog_option", "json_option", "load_config", "open_catalog", "open_store",
           "opened_catalog", "opened_store", "required_config", "say", "store_option", "toolchain"]

store_option = click.option("--store", "store_url", envvar="CACHEKEEPER_STORE", metavar="URL",
                            help="file:///dir, s3://bucket/prefix or gs://bucket/prefix [env CACHEKEEPER_STORE]")
catalog_option = click.option("--catalog", "catalog_url", envvar="CACHEKEEPER_CATALOG", metavar="URL",
                              help="sqlite:///file or postgresql+psycopg://... [env CACHEKEEPER_CATALOG]")
json_option = click.option("--json", "as_json", is_flag=True, help="machine-readable output on stdout")


def say(msg: str) -> None:
    """Human lines go to stderr: stdout is for `--json`, `--print-env` and listings."""
    click.echo(msg, err=True)


def required_config(path: str) -> Config:
    config = load_config(path)
    assert config is not None   # a path always yields a config (or a ConfigError)
    return config


def backend_pairs(pairs: tuple[str, ...]) -> dict[str, str]:
    """`--option KEY=VALUE` pairs as a dict."""
    from ..errors import UsageError

    options: dict[str, str] = {}
    for pair in pairs:
        k, sep, v = pair.partition("=")
        if not sep or not k:
            raise UsageError(f"--option expects KEY=VALUE, got {pair!r}")
        options[k] = v
    return options


def toolchain(config: Config | None, backend: str | None, pairs: tuple[str, ...],
              device: str | None) -> HostToolchain:
    """This host's toolchain for the named backend (or the config's only one), with `--option`s."""
    return host_toolchain(config, pick_backend(config, backend), backend_pairs(pairs), device)


def open_store(url: str | None, config: Config | None, *, create: bool = False) -> Store:
    """The named store, else the config's, else the default. The caller closes it; prefer `opened_store`."""
    from ..stores import open_store as open_url

    return open_url(url or (config.store if config else None), create=create)


def open_catalog(url: str | None, config: Config | None, *, readonly: bool = False) -> Catalog:
    """`readonly`: never migrate (an older schema is a one-line error, not an upgrade behind the operator's
    back). The caller closes it; prefer `opened_catalog`."""
    from ..catalog import Catalog

    return Catalog.open(url or (config.catalog if config else None), auto_migrate=False if readonly else None)


@contextlib.contextmanager
def opened_store(url: str | None, config: Config | None, *, create: bool = False) -> Iterator[Store]:
    store = open_store(url, config, create=create)
    try:
        yield store
    finally:
        store.close()


@contextlib.contextmanager
def opened_catalog(url: str | None, config: Config | None, *, readonly: bool = False) -> Iterator[Catalog]:
    with open_catalog(url, config, readonly=readonly) as catalog:
        yield catalog
