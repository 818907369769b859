"""`cachekeeper report` (a serving host's misses, batched into the store) and `cachekeeper suggest`
(the shapes traffic met that no prebuild covers, optionally written into the config).

    watch(pipe) ─▶ spool ─▶ report [--watch S] ─▶ reports/<fp>/ ─▶ suggest CONFIG [--apply] ─▶ prebuild

`report` imports no torch and writes nothing but one object under reports/ per round.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .. import bounds, settings
from .options import json_option, load_config, number, say, store_option, toolchain

if TYPE_CHECKING:
    from ..config import Config
    from ..reports.miss import Report

MAX_INTERVAL_S = 86_400.0
MIN_INTERVAL_S = 1.0
MAX_SINCE_S = 366 * 86_400.0
_SINCE = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def interval_seconds(text: str, source: str) -> float:
    """A report interval: a number of seconds in [1, 86400]; anything else is one error naming `source`."""
    from ..errors import UsageError

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not MIN_INTERVAL_S <= value <= MAX_INTERVAL_S:
        raise UsageError(f"{source} must be a number of seconds from {MIN_INTERVAL_S:g} to {MAX_INTERVAL_S:g}, "
                         f"got {text!r}")
    return value


def since_seconds(text: str, source: str = "--since") -> float:
    """"7d", "12h", "30m", "90s": how far back to read, at most a year."""
    from ..errors import UsageError

    match = _SINCE.fullmatch(text.strip())
    value = float(match[1]) * _UNIT[match[2]] if match else math.nan
    if not math.isfinite(value) or not 0 < value <= MAX_SINCE_S:
        raise UsageError(f"{source} must be a positive duration up to 366d such as 7d, 12h or 30m, got {text!r}")
    return value


# --- report ----------------------------------------------------------------------------------------


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="the config hydrate used (options)")
@click.option("--backend", help="backend (default: the config's only one, or the one --dest was hydrated for)")
@click.option("--device", help="device the inference runs on, for the fingerprint (as hydrate)")
@click.option("--option", "pairs", multiple=True, metavar="KEY=VALUE", help="backend option (as hydrate)")
@click.option("--dest", type=click.Path(file_okay=False), help="the hydrated dir the server uses (its backend)")
@store_option
@click.option("--spool", "spool_path", envvar=settings.SPOOL.name, type=click.Path(file_okay=False),
              help="where watch(pipe) records calls [env CACHEKEEPER_SPOOL; default $CACHEKEEPER_HOME/spool]")
@click.option("--watch", "every", metavar="SECONDS",
              help="write at most one report every SECONDS (1-86400) until stopped, then once more")
@number("--metrics-port", bound=bounds.PORT, envvar=settings.METRICS_PORT.name, metavar="PORT",
        help="with --watch: serve the runtime-miss counters on http://0.0.0.0:PORT/metrics "
        "(docs/observability.md) [env CACHEKEEPER_METRICS_PORT]")
@json_option
def report(config_path: str | None, backend: str | None, device: str | None, pairs: tuple[str, ...],
           dest: str | None, store_url: str | None, spool_path: str | None, every: str | None,
           metrics_port: int | None, as_json: bool) -> None:
    """Batch the calls `cachekeeper.runtime.watch(pipe)` recorded into one miss report under the store's
    reports/ prefix (the only thing a server-role identity may write)."""
    from ..hydration.destdir import backend_of
    from ..hydration.request import store_on_demand
    from ..runtime.miss_watch import spool_dir

    interval = interval_seconds(every, "--watch") if every is not None else None
    config = load_config(config_path)
    if dest and not backend:   # the dest (or its toolchain dir) names the backend hydrate ran for
        backend = backend_of(Path(dest), needed=config is None or len(config.backend_names()) != 1)
    tc = toolchain(config, backend, pairs, device)
    spool = Path(spool_path) if spool_path else spool_dir()
    sidecar = _metrics_sidecar(metrics_port, interval, tc.name, tc.fingerprint.id)
    with store_on_demand(store_url, config) as store_fn:

        def once() -> None:
            _report_once(spool, tc.fingerprint.id, tc.name, store_fn, as_json,
                         sidecar.observe if sidecar else None)
            if sidecar:
                sidecar.round_done()

        if interval is None:
            once()
        else:
            from ..errors import StoreError
            from .rounds import every as rounds

            rounds(interval, once, (StoreError,), "the calls are kept for the next round")


def _metrics_sidecar(port: int | None, interval: float | None, backend: str, fingerprint_id: str) -> Any:
    """`--metrics-port`: the runtime-miss counters on /metrics (observability/metrics.py), or None. A port
    in use or a missing library is one warning; the reports are written either way."""
    if port is None:
        return None
    from ..errors import UsageError
    from ..observability import metrics_or_warn

    if interval is None:
        raise UsageError("--metrics-port serves /metrics while `report --watch SECONDS` runs; add --watch")
    m = metrics_or_warn("--metrics-port")
    if m is None:
        return None
    sidecar = m.RuntimeMetrics(backend, fingerprint_id, interval)
    return sidecar if sidecar.serve(port) else None


def _report_once(spool: Path, fingerprint_id: str, backend: str, store_fn: Callable[[], object],
                 as_json: bool, observe: Callable[[Any], None] | None = None) -> None:
    from ..reports.miss import build_report, claim, write_report
    from ..stores.base import Store

    taken = claim(spool)
    for line in taken.warnings:   # one per spool file that held anything this reporter cannot use
        say(f"warning: {line}")
    if not taken.records:
        taken.release()
        say("report: nothing served since the last report")
        return
    rep = build_report(taken.records, fingerprint_id, backend)
    store = store_fn()
    assert isinstance(store, Store)
    key = write_report(store, rep)
    taken.release()   # only once the report is stored: a failed round keeps the records for the next
    if observe is not None:
        observe(rep.rows)   # counted once stored: a failed round's calls are counted by the round that stores them
    if as_json:
        click.echo(json.dumps({"key": key, "calls": len(taken.records), "rows": len(rep.rows),
                               "compiled": sum(r.compiled for r in rep.rows), "dropped": rep.dropped}))
    say(f"report: {len(taken.records)} calls in {len(rep.rows)} rows "
        f"({sum(r.compiled for r in rep.rows)} compiled) -> {store.url}/{key}")


# --- suggest ---------------------------------------------------------------------------------------


@click.command()
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.option("--since", "since", default="7d", show_default=True, help="read reports this recent (e.g. 7d, 12h)")
@click.option("--backend", help="only this backend's toolchain (default: every backend the config names)")
@click.option("--device")
@click.option("--option", "pairs", multiple=True, metavar="KEY=VALUE")
@store_option
@click.option("--apply", "apply_", is_flag=True, help="add the suggested shapes to CONFIG (comments kept)")
@json_option
def suggest(config_path: str, since: str, backend: str | None, device: str | None, pairs: tuple[str, ...],
            store_url: str | None, apply_: bool, as_json: bool) -> None:
    """Shapes that serving hosts met but CONFIG does not prebuild, per toolchain, ranked by hosts that
    compiled them and compile time; --apply writes them into CONFIG for the next prebuild."""
    from ..config.editor import ConfigEdit
    from ..config.schema import parse_config, shape_problem
    from ..format.spec import Shape
    from ..inspection.suggest import refused, served_not_prebuilt
    from ..reports.miss import read_reports, since_stamp
    from .options import opened_store

    window = since_seconds(since)
    edit = ConfigEdit.read(config_path)   # first: --apply refuses if the file changes after this
    config = parse_config(edit.text, config_path, base_dir=Path(config_path).parent)
    names = [backend] if backend else config.backend_names()
    toolchains = {toolchain(config, n, pairs, device).fingerprint.id: n for n in names}
    reports: list[Report] = []
    skipped: list[str] = []
    with opened_store(store_url, config) as store:
        for fp_id in toolchains:
            got, bad = read_reports(store, fp_id, since_stamp(window))
            reports += got
            skipped += bad
    skipped += _unknown_models(reports, config)
    known = set(config.model_names())
    ranked, refused_lines = refused(served_not_prebuilt(
        reports, lambda fp, model, shape: model not in known
        or toolchains[fp] not in config.model(model).backends or shape in config.model(model).shapes),
        shape_problem)
    skipped += refused_lines
    for line in skipped:
        say(f"warning: {line}")
    if as_json:
        click.echo(json.dumps({"suggestions": [s.to_dict() for s in ranked], "reports": len(reports),
                               "skipped": skipped}))
    else:
        for fp_id, name in toolchains.items():
            mine = [s for s in ranked if s.fingerprint_id == fp_id]
            if mine:
                click.echo(f"toolchain {fp_id} ({name}):")
                for s in mine:
                    click.echo(f"  {s.line()}")
    say(f"suggest: {_n(len(ranked), 'shape')} served but not prebuilt, from {_n(len(reports), 'report')}")
    if apply_ and ranked:
        additions: dict[str, dict[Shape, None]] = {}
        for s in ranked:   # a shape two toolchains of one model served is one shape of the config
            additions.setdefault(s.model, {})[s.shape] = None
        text, notes = edit.add_shapes(config, {m: list(shapes) for m, shapes in additions.items()})
        edit.write(text)
        for line in notes:
            say(f"suggest: {line}")
        added = sum(len(shapes) for shapes in additions.values())
        say(f"suggest: added {_n(added, 'shape')} to {config_path}; `cachekeeper prebuild {config_path}` "
            "builds them")


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _unknown_models(reports: list[Report], config: Config) -> list[str]:
    known = set(config.model_names())
    unknown = sorted({r.model for rep in reports for r in rep.rows} - known)
    return [f"reports name model {m!r}, which {config.source} does not have; skipped" for m in unknown]
