"""What the commands share: the click options that name a store, a catalog or JSON output, and the
resources they open, as context managers, so a command closes every store and catalog it opened.

Light: click and the stdlib at import; configs, stores and catalogs are imported when a command opens one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from .. import settings
from ..backends.host import HostToolchain, host_toolchain, pick_backend
from ..bounds import Bound
from ..hydration.request import load_config

if TYPE_CHECKING:
    from ..catalog import Catalog
    from ..config import Config
    from ..stores.base import Store

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["Number", "backend_pairs", "catalog_option", "excludes", "json_option", "load_config", "needs", "number",
           "open_catalog", "open_store", "opened_catalog", "opened_store", "param_source", "required_config", "say",
           "store_option", "toolchain"]

store_option = click.option("--store", "store_url", envvar=settings.STORE.name, metavar="URL",
                            help="file:///dir, s3://bucket/prefix or gs://bucket/prefix [env CACHEKEEPER_STORE]")
catalog_option = click.option("--catalog", "catalog_url", envvar=settings.CATALOG.name, metavar="URL",
                              help="sqlite:///file or postgresql+psycopg://... [env CACHEKEEPER_CATALOG]")
json_option = click.option("--json", "as_json", is_flag=True, help="machine-readable output on stdout")


class Number(click.ParamType):  # type: ignore[type-arg]
    """A click type for one of the bounds in `bounds.py`. A bad value is one `error:` line naming its
    source: the flag, or `env VAR` when the value came from the environment (the CLI's usage-error
    handler in cli/__init__.py formats it)."""

    def __init__(self, bound: Bound) -> None:
        self.bound = bound
        self.name = "integer" if bound.integer else "number"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int | float:
        try:
            return self.bound.parse(value)
        except ValueError as exc:
            self.fail(f"{exc}; give {self.bound.describe()}", param, ctx)


def number(*names: str, bound: Bound, **kw: Any) -> Callable[[F], F]:
    """`click.option` for a bounded number (type and metavar from `bound`)."""
    kw.setdefault("metavar", "SECONDS" if bound.unit == "seconds" else "N")
    return click.option(*names, type=Number(bound), **kw)


def param_source(ctx: click.Context, param: click.Parameter) -> str:
    """Where a parameter's value came from, as an `error:` line names it."""
    from click.core import ParameterSource

    if param.name and ctx.get_parameter_source(param.name) == ParameterSource.ENVIRONMENT:
        envvar = param.envvar if isinstance(param, click.Option) else None
        if isinstance(envvar, str):
            return f"env {envvar}"
    opts = getattr(param, "opts", None) or [param.name or "?"]
    return max(opts, key=len) if isinstance(param, click.Option) else (param.name or "?").upper()


def _flag(ctx: click.Context, name: str) -> str:
    param = next((p for p in ctx.command.params if p.name == name), None)
    return param_source(ctx, param) if param is not None else name


def _typed(ctx: click.Context, name: str) -> bool:
    """Whether the user typed this flag on the command line (env vars are fleet-wide defaults, not typos)."""
    from click.core import ParameterSource

    return ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE


def _has_value(ctx: click.Context, name: str) -> bool:
    value = ctx.params.get(name)
    return value not in (None, False, (), "")


def needs(modifier: str, *targets: str, met: bool = False) -> None:
    """A modifier flag typed without any flag it modifies (`--env-format` without `--env-file`) is one
    usage error (exit 2), not silently ignored. `met`: the target came from elsewhere (the config)."""
    from ..errors import UsageError

    ctx = click.get_current_context()
    if not _typed(ctx, modifier) or met or any(_has_value(ctx, t) for t in targets):
        return
    flags = " or ".join(_flag(ctx, t) for t in targets)
    raise UsageError(f"{_flag(ctx, modifier)} only works with {flags}, which is not given",
                     f"add {_flag(ctx, targets[0])} or drop {_flag(ctx, modifier)}")


def excludes(modifier: str, other: str, why: str) -> None:
    """A modifier flag typed beside a flag that makes it meaningless (`--wait` with `--no-catalog`)."""
    from ..errors import UsageError

    ctx = click.get_current_context()
    if _typed(ctx, modifier) and _has_value(ctx, other):
        raise UsageError(f"{_flag(ctx, modifier)} has no effect with {_flag(ctx, other)}: {why}",
                         f"drop {_flag(ctx, modifier)} or {_flag(ctx, other)}")


def say(msg: str) -> None:
    """Human lines go to stderr: stdout is for `--json`, `--print-env` and listings. Through the one
    logger (observability/logs.py): `warning: ...` is a warning event, any other line a progress event."""
    from ..observability import logs

    logs.line(msg)


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

    url = url or (config.catalog if config else None)
    if readonly:
        _require_existing(url)
    return Catalog.open(url, auto_migrate=False if readonly else None)


def _require_existing(url: str | None) -> None:
    """Inspection never creates a catalog: a SQLite file that is not there (a typo, a fresh host) is one
    error, not an empty catalog made on the spot."""
    from ..catalog.settings import check_url, default_url
    from ..errors import CatalogMissing

    scheme, sep, rest = check_url(url or default_url()).partition("://")
    if scheme.partition("+")[0] != "sqlite" or not sep:
        return
    path = rest[1:].partition("?")[0]
    if path and path != ":memory:" and not Path(path).is_file():
        raise CatalogMissing(f"no catalog at {path}", url=f"sqlite:///{path}", path=path)


def forget_in_catalog(url: str | None, keys: list[str]) -> int | None:
    """After deleting manifests from the store: drop their catalog rows (the catalog follows the store).
    None when there is no catalog to update (a SQLite file that was never made is not created for this)."""
    from ..errors import CatalogMissing

    if not keys:
        return 0
    try:
        _require_existing(url)
    except CatalogMissing:
        return None
    with opened_catalog(url, None) as catalog:
        return catalog.forget_keys(keys)


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
