"""`cachekeeper diff` and `explain`: what an upgrade invalidates, and why a host misses an entry.

Read-only: the catalog is opened without migrating it (an older schema is a one-line error, not an
upgrade behind the operator's back). SQLAlchemy is imported inside the commands.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click

from .. import bounds
from .options import (
    catalog_option,
    json_option,
    load_config,
    number,
    opened_catalog,
    opened_store,
    required_config,
    store_option,
    toolchain,
)

if TYPE_CHECKING:
    from ..config import MatrixEntry
    from ..format.fingerprint import Fingerprint


# --- diff --------------------------------------------------------------------------------------------


@click.command()
@click.argument("a", required=False)
@click.argument("b", required=False)
@click.option("--host", "use_host", is_flag=True, help="compare this host's toolchain (A) with fingerprint B")
@click.option("--set", "sets", multiple=True, metavar="FIELD=VALUE",
              help="what-if: this host's toolchain (A) against itself with these fields changed (B)")
@click.option("--backend", help="backend of this host's toolchain (default: B's, or the config's only one)")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="config for backend options")
@click.option("--device", help="device for this host's fingerprint (cpu, cuda)")
@click.option("--option", "pairs", multiple=True, metavar="KEY=VALUE", help="backend option for the fingerprint")
@number("--workers", bound=bounds.PLAN_WORKERS, default=1, show_default=True,
              help="parallel builders for the rebuild estimate")
@click.option("--all", "show_all", is_flag=True, help="list every entry (default: the first 50 per side)")
@catalog_option
@json_option
def diff(a: str | None, b: str | None, use_host: bool, sets: tuple[str, ...], backend: str | None,
         config_path: str | None, device: str | None, pairs: tuple[str, ...], workers: int, show_all: bool,
         catalog_url: str | None, as_json: bool) -> None:
    """Fields, entries and rebuild cost between two toolchains.

    \b
    cachekeeper diff A B                      two fingerprint ids (or unique prefixes) in the catalog
    cachekeeper diff --host B                 this host's toolchain against fingerprint B
    cachekeeper diff --set torch=2.14.0 ...   this host's toolchain against a what-if upgrade
    """
    from ..catalog import views
    from ..errors import UsageError
    from ..inspection.diff import plan_diff, render_text, resolve_prefix, with_overrides

    positional = [x for x in (a, b) if x]
    if sets and (use_host or positional):
        raise UsageError("--set compares this host with a what-if; it takes no fingerprint ids and no --host")
    want = 1 if use_host else 0 if sets else 2
    if len(positional) != want:
        raise UsageError({2: "diff needs two fingerprint ids (A B), or --host B, or --set FIELD=VALUE",
                          1: "--host compares this host with one fingerprint id: diff --host B",
                          0: "--set takes no fingerprint ids"}[want])
    config = load_config(config_path)
    with opened_catalog(catalog_url, config, readonly=True) as catalog, views.reading(catalog) as conn:
        ids = [resolve_prefix(p, views.fingerprint_ids(conn, p.strip().lower())) for p in positional]
        resolved: list[Fingerprint] = [fp for fp in (views.fingerprint(conn, i) for i in ids) if fp is not None]
        if use_host or sets:
            host = toolchain(config, backend or (resolved[0].backend if resolved else None), pairs,
                             device).fingerprint
            resolved = [host, with_overrides(host, sets)] if sets else [host, *resolved]
        fa, fb = resolved
        if fa.backend != fb.backend:
            raise UsageError(f"{fa.id} is a {fa.backend} toolchain and {fb.id} a {fb.backend} one",
                             "compare toolchains of one backend")
        report = plan_diff(fa, fb, views.entries_only_in(conn, fa.id, fb.id), views.entries_only_in(conn, fb.id, fa.id),
                           workers=workers)
    if as_json:
        click.echo(json.dumps(report.to_dict()))
        return
    for line in render_text(report, limit=None if show_all else 50):
        click.echo(line)


# --- explain -----------------------------------------------------------------------------------------


@click.command()
@click.argument("entry", required=False, metavar="[KEY]")
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False))
@click.option("--model", help="the entry's model (with --shape), instead of KEY")
@click.option("--shape", metavar="HxWxB", help="the entry's shape, with --model")
@click.option("--backend")
@click.option("--device", help="device the inference runs on (cpu, cuda), for the fingerprint")
@click.option("--option", "pairs", multiple=True, metavar="KEY=VALUE", help="backend option for the fingerprint")
@store_option
@catalog_option
@click.option("--no-catalog", is_flag=True, help="ask the store instead of the catalog")
@json_option
def explain(entry: str | None, config_path: str, model: str | None, shape: str | None, backend: str | None,
            device: str | None, pairs: tuple[str, ...], store_url: str | None, catalog_url: str | None,
            no_catalog: bool, as_json: bool) -> None:
    """Would this host hit an entry of CONFIG? On a miss: the nearest built toolchains, the fields that
    differ and a hint for each. Exits 1 when an entry would miss."""
    from ..inspection.explain import Explanation, explain_entry, explain_from_store

    config = required_config(config_path)
    tc = toolchain(config, backend, pairs, device)
    host = tc.fingerprint
    chosen = _choose_entries(config.entries({tc.name}), entry, model, shape, config.source)
    labels = {e.spec.key: e.spec.label() for e in chosen}
    results: list[Explanation]
    if no_catalog:
        with opened_store(store_url, config) as store:
            results = explain_from_store(store, host, list(labels), labels)
    else:
        from ..catalog import views
        from ..presence import look_up

        with opened_catalog(catalog_url, config, readonly=True) as catalog:
            presence = look_up(host.id, list(labels), catalog=catalog)
            with views.reading(catalog) as conn:
                results = [explain_entry(host, k, label, views.holders(conn, k), hit=presence.is_built(k))
                           for k, label in labels.items()]
    for r in results:
        if as_json:
            click.echo(json.dumps(r.to_dict()))   # one JSON line per entry
        else:
            for line in r.lines():
                click.echo(line)
    if any(not r.hit for r in results):
        sys.exit(1)


def _choose_entries(entries: list[MatrixEntry], key: str | None, model: str | None, shape: str | None,
                    source: str) -> list[MatrixEntry]:
    from ..errors import UsageError

    if key is not None and (model or shape):
        raise UsageError("name the entry by KEY or by --model/--shape, not both")
    if key is not None:
        found = [e for e in entries if e.spec.key.startswith(key.strip().lower())]
        if len(found) > 1:
            raise UsageError(f"entry key prefix {key!r} matches {len(found)} entries of {source}",
                             "give more characters of the key (`cachekeeper validate CONFIG` lists them)")
    elif model:
        found = [e for e in entries if e.spec.model == model and (shape is None or e.spec.shape.label() == shape)]
    else:
        raise UsageError("which entry? pass its KEY, or --model M [--shape HxWxB]")
    if not found:
        what = f"key {key!r}" if key is not None else f"model {model!r}" + (f" with shape {shape}" if shape else "")
        raise UsageError(f"{source} has no entry with {what}", "`cachekeeper validate CONFIG` lists its entries")
    return found
