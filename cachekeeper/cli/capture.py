"""`cachekeeper capture`: list (and publish) what the serving runtime compiled into a hydrated dir."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from .. import bounds, settings
from .options import backend_pairs, catalog_option, json_option, needs, number, say, store_option

if TYPE_CHECKING:
    from ..captures.capture import CaptureReport


@click.command()
@click.option("--dest", required=True, type=click.Path(file_okay=False), help="the hydrated cache dir to look at")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="the config hydrate used (options)")
@click.option("--backend", help="backend (default: the one the dest was hydrated for)")
@click.option("--device", help="device the inference runs on, for the fingerprint (as hydrate)")
@click.option("--option", "pairs", multiple=True, metavar="KEY=VALUE", help="backend option (as hydrate)")
@click.option("--publish", is_flag=True, help="publish the new files as a captured set for this toolchain; only "
              "with `capture: publish` in the config (every host runs what a serving host writes back)")
@store_option
@catalog_option
@click.option("--sign-key", envvar=settings.SIGNING_KEY.name, type=click.Path(dir_okay=False),
              help="ed25519 private key (PEM) to sign the captured manifest [env CACHEKEEPER_SIGNING_KEY]")
@number("--watch", bound=bounds.WATCH, help="publish every SECONDS until stopped (then once more)")
@number("--settle", bound=bounds.SETTLE, default=2.0, show_default=True,
              help="a file counts as complete once its size and mtime held this long")
@number("--lock-timeout", bound=bounds.LOCK_TIMEOUT, default=10.0, show_default=True)
@number("--nice", bound=bounds.NICE, default=10, show_default=True,
        help="CPU niceness, so capture never competes with the server")
@json_option
def capture(dest: str, config_path: str | None, backend: str | None, device: str | None, pairs: tuple[str, ...],
            publish: bool, store_url: str | None, catalog_url: str | None, sign_key: str | None,
            watch: float | None, settle: float, lock_timeout: float, nice: int, as_json: bool) -> None:
    """List the files the runtime added to a hydrated DEST since hydrate (those its state file does not
    name); with --publish, write them back as a captured set that the next hydrate on a host of this
    toolchain includes."""
    from ..captures.resolve import capture_rounds, resolve_capture
    from ..errors import UsageError

    if watch is not None and not publish:
        raise UsageError("--watch needs --publish")
    for flag in ("sign_key", "store_url", "catalog_url"):
        needs(flag, "publish")
    if nice:
        os.nice(nice)
    req = resolve_capture(dest, config=config_path, backend=backend, device=device, options=backend_pairs(pairs),
                          publish=publish, store_url=store_url, catalog_url=catalog_url, sign_key=sign_key or None,
                          settle_s=settle, lock_timeout=lock_timeout)
    with capture_rounds(req) as once:   # one store for every round, closed at the end
        if watch is None:
            _show(once(), publish, as_json)
        else:
            _watch(once, watch, as_json)


def _show(report: CaptureReport, published: bool, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(report.to_dict()))
    elif not published:
        for path in report.files:
            click.echo(path)
    for path in report.refused:
        say(f"warning: refused symlink {report.dest / path} (capture never follows or publishes links)")
    if report.error:
        say(f"warning: {report.error}")
    if published:
        what = (f"{len(report.files)} files -> {report.manifest}"
                + ("" if report.created or not report.manifest else " (another host published it first)")
                if report.files else "nothing new")
        say(f"capture: {what}; {report.placed} placed by hydrate ({report.seconds:.2f}s)")
    else:
        say(f"capture: {len(report.files)} new files, {len(report.writing)} still being written, "
             f"{report.placed} placed by hydrate -> {report.dest}")


def _watch(once: Callable[[], CaptureReport], every: float, as_json: bool) -> None:
    """Publish every `every` seconds; a failed round (store down, files in flight) keeps its list for the
    next one. SIGTERM (pod or unit stopping) ends the wait early and runs one last round."""
    from ..errors import CaptureError, LockBusy, StoreError
    from .rounds import every as rounds

    # store down, files in flight, a hydrate running
    rounds(every, lambda: _show(once(), True, as_json), (StoreError, CaptureError, LockBusy), "kept for the next round")
