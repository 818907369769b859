"""The inspection side of the CLI: `ls`, `stats`, `coverage` and `dashboard` (what is built, for which
toolchain, at what size). `diff` and `explain` are in compare.py.

SQLAlchemy and the web stack are imported inside the commands. The dashboard opens the catalog without
migrating it (an older schema is a one-line error, not an upgrade behind the operator's back).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import click

from .. import bounds
from .options import (
    catalog_option,
    json_option,
    number,
    open_catalog,
    opened_catalog,
    opened_store,
    required_config,
    say,
    store_option,
    toolchain,
)

if TYPE_CHECKING:
    from ..catalog import Catalog
    from ..config import Config
    from ..stores.base import Store


@click.command(name="ls")
@click.option("--backend")
@click.option("--model")
@click.option("--fingerprint", "fingerprint_id")
@click.option("--captured", is_flag=True, help="list captured sets (runtime compiles written back), not entries")
@catalog_option
@json_option
def ls_(backend: str | None, model: str | None, fingerprint_id: str | None, captured: bool, catalog_url: str | None,
        as_json: bool) -> None:
    """List cached entries (from the catalog). --json: one JSON object per line, streamed."""
    from ..catalog.listing import direct_lines
    from ..format.manifest import KIND_CAPTURED, KIND_ENTRY

    kind = KIND_CAPTURED if captured else KIND_ENTRY
    if as_json or not captured:
        # The plain case with the database driver alone, no SQLAlchemy import (catalog/listing.py);
        # None: the Catalog below migrates, or says what is wrong.
        lines = direct_lines(catalog_url, fingerprint_id=fingerprint_id, backend=backend, model=model, kind=kind,
                             as_json=as_json)
        if lines is not None:
            _ls_write(lines, as_json)
            return
    with opened_catalog(catalog_url, None, readonly=True) as catalog:
        if captured and not as_json:
            _ls_captured(catalog, fingerprint_id, backend, model)
        else:
            _ls_stream(catalog, fingerprint_id, backend, model, kind, as_json)


def _ls_stream(catalog: Catalog, fingerprint_id: str | None, backend: str | None, model: str | None, kind: str,
               as_json: bool) -> None:
    _ls_write(catalog.listing(fingerprint_id=fingerprint_id, backend=backend, model=model, kind=kind,
                              as_json=as_json), as_json)


def _ls_write(lines: Iterator[list[str]], as_json: bool) -> None:
    """Entries written as the database hands them over, in batches (catalog/listing.py): constant memory."""
    from ..catalog.listing import written

    n = written(lines, sys.stdout)
    sys.stdout.flush()
    if not as_json:
        say(f"{n} entries")


def _ls_captured(catalog: Catalog, fingerprint_id: str | None, backend: str | None, model: str | None) -> None:
    from ..format.manifest import KIND_CAPTURED

    rows = catalog.find(fingerprint_id=fingerprint_id, backend=backend, model=model, kind=KIND_CAPTURED)
    for r in rows:
        click.echo(f"{r.fingerprint_id}  {r.name}  {r.backend:<8} captured  {r.total_size / 1e6:8.1f} MB  "
                   f"{r.file_count} files  host {r.build.get('host', '?')} at {r.build.get('time', '?')}")
    say(f"{len(rows)} captured sets")


traffic_option = click.option("--traffic", is_flag=True,
                              help="also show what serving hosts met but no entry covers (miss reports in the store)")
since_option = click.option("--since", default="7d", show_default=True, help="with --traffic: reports this recent")


@click.command()
@catalog_option
@traffic_option
@store_option
@since_option
@json_option
def stats(catalog_url: str | None, traffic: bool, store_url: str | None, since: str, as_json: bool) -> None:
    """Entries and sizes per toolchain (from the catalog); --traffic adds, per toolchain, the shapes served
    but not prebuilt (from the store's miss reports)."""
    from .options import needs
    from .traffic import since_seconds

    needs("since", "traffic")
    window = since_seconds(since) if traffic else 0.0
    with opened_catalog(catalog_url, None, readonly=True) as catalog:
        rows = catalog.fingerprints()
        table = _traffic(catalog, store_url, window) if traffic else None
    served = table["toolchains"] if table else {}
    if as_json:
        docs = [{**r.__dict__, **({"served_not_prebuilt": served.get(r.id, [])} if table else {})} for r in rows]
        click.echo(json.dumps(docs, default=str))
    else:
        for r in rows:
            click.echo(f"{r.id}  {r.backend:<8} {r.entries:5d} entries  {r.captured:5d} captured  "
                       f"{r.total_size / 1e6:10.1f} MB")
            for s in served.get(r.id, []):
                click.echo(f"  served, not prebuilt: {s['model']} {s['shape']}  {s['calls']} calls  "
                           f"{s['hosts_compiled']} hosts compiled  {float(s['compile_s']):.1f}s of compile")  # type: ignore[arg-type]
    if table:
        for line in table["skipped"]:
            say(f"warning: {line}")


def _traffic(catalog: Catalog, store_url: str | None, since_s: float) -> dict[str, Any]:
    from ..format.manifest import KIND_ENTRY
    from ..inspection.traffic import prebuilt_shapes, traffic

    with opened_store(store_url, None) as store:
        return traffic(store, prebuilt_shapes(catalog.find(kind=KIND_ENTRY)), since_s)


@click.command()
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.option("--backend")
@click.option("--device")
@click.option("--option", "pairs", multiple=True, metavar="KEY=VALUE")
@click.option("--fingerprint", "fingerprint_id", help="check another toolchain's coverage (default: this host's)")
@store_option
@catalog_option
@click.option("--no-catalog", is_flag=True, help="ask the store instead of the catalog")
@json_option
def coverage(config_path: str, backend: str | None, device: str | None, pairs: tuple[str, ...],
             fingerprint_id: str | None, store_url: str | None, catalog_url: str | None, no_catalog: bool,
             as_json: bool) -> None:
    """Which entries of CONFIG are built for a toolchain; exits 1 if a deployment would compile."""
    from .options import excludes, needs

    needs("store_url", "no_catalog")   # the catalog answers unless --no-catalog
    excludes("catalog_url", "no_catalog", "the store answers instead")
    for flag in ("device", "pairs"):
        excludes(flag, "fingerprint_id", "--fingerprint names the toolchain; these only compute this host's")
    config = required_config(config_path)
    names = [backend] if backend else config.backend_names()
    fp_ids = {n: fingerprint_id or toolchain(config, n, pairs, device).fingerprint.id for n in names}
    if no_catalog:
        with opened_store(store_url, config) as store:
            rows, captured = _coverage(config, fp_ids, store=store)
    else:
        with opened_catalog(catalog_url, config, readonly=True) as catalog:
            rows, captured = _coverage(config, fp_ids, catalog=catalog)
    missing = [r for r in rows if not r["built"]]
    if as_json:
        click.echo(json.dumps({"entries": rows, "missing": len(missing), "captured": captured}))
    else:
        for r in rows:
            state = "built  " if r["built"] else "MISSING"
            held = f"  (held by {r['held_by']})" if r["held_by"] else ""
            click.echo(f"{state}  {r['fingerprint_id']}  {r['key'][:12]}  {r['entry']}{held}")
        for fp_id, n in sorted(captured.items()):
            if n:
                click.echo(f"captured {fp_id}  {n} sets of runtime compiles (`cachekeeper ls --captured`)")
    say(f"coverage: {len(rows) - len(missing)}/{len(rows)} entries built"
        + (f", {sum(captured.values())} captured sets" if any(captured.values()) else ""))
    if missing:
        sys.exit(1)


def _coverage(config: Config, fp_ids: dict[str, str], *, catalog: Catalog | None = None,
              store: Store | None = None) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """(a row per entry and backend, captured sets per fingerprint: runtime compiles the config does not
    prebuild), from the one catalog or store the command opened."""
    from ..presence import captured_sets, look_up

    rows: list[dict[str, Any]] = []
    captured: dict[str, int] = {}
    for name, fp_id in fp_ids.items():
        entries = config.entries({name})
        # With a catalog, its queue also says which missing entries a live worker is building right now.
        presence = look_up(fp_id, [e.spec.key for e in entries], catalog=catalog, store=store,
                           holders=catalog is not None)
        captured[fp_id] = captured_sets(fp_id, catalog=catalog, store=store)
        rows += [{"backend": name, "fingerprint_id": fp_id, "key": e.spec.key, "entry": e.spec.label(),
                  "built": presence.is_built(e.spec.key), "held_by": presence.held.get(e.spec.key)}
                 for e in entries]
    return rows, captured


@click.command()
@catalog_option
@click.option("--host", default="127.0.0.1", show_default=True,
              help="address to bind; the page has no login: keep it local or behind an authenticating proxy")
@number("--port", bound=bounds.PORT, default=8765, show_default=True, help="0: any free port")
@click.option("--root-path", default="", help="URL prefix when served behind a proxy under a sub-path")
@traffic_option
@store_option
@since_option
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="add this config's coverage (built / missing per toolchain) to /metrics")
def dashboard(catalog_url: str | None, host: str, port: int, root_path: str, traffic: bool, store_url: str | None,
              since: str, config_path: str | None) -> None:
    """Serve the read-only coverage dashboard (matrix, build queue, publishes, diffs)."""
    from ..dashboard.app import create_app, listen, serve, url_of
    from .options import needs
    from .traffic import since_seconds

    needs("since", "traffic")
    window = since_seconds(since) if traffic else 0.0
    catalog = open_catalog(catalog_url, None, readonly=True)   # fail now, in one line, not on the first request
    try:
        sock = listen(host, port)   # a port in use fails here, before any URL is printed
        if host not in ("127.0.0.1", "localhost", "::1"):
            say(f"warning: binding {host}: the dashboard has no authentication; put a proxy in front")
        with sock:
            view = traffic_view(catalog, store_url, window) if traffic else None
            config = required_config(config_path) if config_path else None
            cover = (lambda: config_coverage(catalog, config)) if config is not None else None
            app = create_app(catalog, view, cover)
            say(f"dashboard: {url_of(sock, root_path)} ({catalog.url})")
            serve(app, sock, root_path)
    finally:
        catalog.close()


def config_coverage(catalog: Catalog, config: Config) -> list[dict[str, Any]]:
    """/metrics' coverage of `config`: per toolchain the catalog knows for one of its backends, how many
    of the config's entries for that backend are built and missing (read per scrape)."""
    from ..catalog import views
    from ..presence import look_up

    with views.reading(catalog) as conn:
        fps = views.fingerprint_summaries(conn)
    out: list[dict[str, Any]] = []
    for fp in fps:
        if fp["backend"] not in config.backend_names():
            continue
        keys = [e.spec.key for e in config.entries({fp["backend"]})]
        presence = look_up(fp["id"], keys, catalog=catalog)
        built = sum(1 for k in keys if presence.is_built(k))
        out.append({"backend": fp["backend"], "fingerprint": fp["id"], "built": built, "missing": len(keys) - built})
    return out


def traffic_view(catalog: Catalog, store_url: str | None, since_s: float) -> Callable[[], dict[str, Any]]:
    """The dashboard's traffic table, read per request; a store that fails is a line on the page."""
    from ..errors import CachekeeperError

    def view() -> dict[str, Any]:
        try:
            table = _traffic(catalog, store_url, since_s)
        except CachekeeperError as exc:
            table = {"toolchains": {}, "reports": 0, "skipped": [], "error": exc.message}
        days = since_s / 86_400
        return {**table, "since": f"{days:g}d" if days >= 1 else f"{since_s / 3600:g}h"}

    return view
