"""The build side of the CLI: `prebuild` (queue, leases, shards, parallel builds), `validate` (a config's
entries, without building) and `keygen` (the key that signs what prebuild publishes).

prebuild's exit codes: 0 when every wanted entry is built (here or by another worker), 7 when a build failed,
13 when entries are still held by live workers (without --wait), 5 when a queue job was written by
another cachekeeper release, 2 for bad settings.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .. import bounds, settings
from .options import (
    catalog_option,
    excludes,
    json_option,
    number,
    opened_catalog,
    opened_store,
    required_config,
    say,
    store_option,
)

if TYPE_CHECKING:
    from ..config import Config
    from ..worker.prebuild import Outcome, RunSettings


@click.command()
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@store_option
@catalog_option
@click.option("--no-catalog", is_flag=True, help="publish to the store only (no index, no shared queue)")
@click.option("--backend", "backends", multiple=True, help="only these backends")
@click.option("--model", "models", multiple=True, help="only these models")
@click.option("--only", "only", multiple=True, metavar="KEY", help="only these entry keys (or 12-char prefixes)")
@click.option("--worker", envvar=settings.WORKER.name,
              help="worker id in the shared queue (default host:pid) [env CACHEKEEPER_WORKER]")
@number("--lease", bound=bounds.LEASE, default=30.0, show_default=True,
              help="a claimed entry returns to the queue this long after its worker stops renewing it")
@number("--heartbeat", bound=bounds.HEARTBEAT, default=5.0, show_default=True,
              help="how often a live worker renews its lease (shorter than --lease)")
@click.option("--wait", is_flag=True, help="wait for entries other live workers are building")
@click.option("--shard", metavar="I/N",
              help="build only shard I of N (N alone: I from JOB_COMPLETION_INDEX or AWS_BATCH_JOB_ARRAY_INDEX)")
@number("--workers", bound=bounds.WORKERS, help="parallel builds on this host (default: the config's build.workers)")
@click.option("--verify-store", is_flag=True, help="also check the store for entries the catalog lists as built")
@click.option("--sign-key", envvar=settings.SIGNING_KEY.name, type=click.Path(dir_okay=False),
              help="ed25519 private key (PEM) to sign manifests with [env CACHEKEEPER_SIGNING_KEY]")
@click.option("--metrics-push", envvar=settings.METRICS_PUSH.name, metavar="URL",
              help="push each entry's build seconds and outcome to this Pushgateway when done (a Kubernetes "
              "Job's convention; docs/observability.md) [env CACHEKEEPER_METRICS_PUSH]")
@click.option("--metrics-file", envvar=settings.METRICS_FILE.name, metavar="PATH",
              help="else write them here in node_exporter's textfile format [env CACHEKEEPER_METRICS_FILE]")
@json_option
def prebuild(config_path: str, store_url: str | None, catalog_url: str | None, no_catalog: bool,
             backends: tuple[str, ...], models: tuple[str, ...], only: tuple[str, ...], worker: str | None,
             lease: float, heartbeat: float, wait: bool, shard: str | None, workers: int | None,
             verify_store: bool, sign_key: str | None, metrics_push: str | None, metrics_file: str | None,
             as_json: bool) -> None:
    """Compile every entry of CONFIG's matrix for this host's toolchains and publish the caches."""
    from ..errors import BuildFailed, BuildsInProgress, QueuePayloadError, UsageError
    from ..worker.lease import LeaseSettings
    from ..worker.prebuild import RunSettings, held_summary
    from ..worker.prebuild import prebuild as run
    from ..worker.shard import parse_shard

    for flag in ("wait", "verify_store", "worker", "lease", "heartbeat", "catalog_url"):
        excludes(flag, "no_catalog", "it acts on the catalog's shared queue or index")
    run_settings = RunSettings(lease=LeaseSettings(lease, heartbeat), wait=wait, verify_store=verify_store,
                               worker=worker, shard=parse_shard(shard) if shard else None, workers=workers)
    if heartbeat >= lease:
        raise UsageError(f"--heartbeat {heartbeat:g} must be shorter than --lease {lease:g}",
                         "a lease that expires before its renewal loses the entry to another worker")
    config = required_config(config_path)
    if sign_key:
        from ..format.signing import SigningKey
        run_settings = RunSettings(**{**run_settings.__dict__, "signing_key": SigningKey.load(Path(sign_key))})
    with contextlib.ExitStack() as stack:
        store = stack.enter_context(opened_store(store_url, config, create=True))
        catalog = None if no_catalog else stack.enter_context(opened_catalog(catalog_url, config))
        report = run(config, store, catalog=catalog, backends=set(backends) or None, models=set(models) or None,
                     only=set(only) or None, settings=run_settings, progress=_progress)
    if metrics_push or metrics_file:
        _write_metrics(report.outcomes, config, metrics_push, metrics_file, worker, run_settings)
    if as_json:
        click.echo(json.dumps({"counts": report.counts(), "outcomes": [o.__dict__ for o in report.outcomes],
                               "swept_workdirs": [str(p) for p in report.swept]}))
    if report.swept:
        say(f"prebuild: removed {len(report.swept)} workdirs of dead workers")
    where = f" (shard {run_settings.shard.label()})" if run_settings.shard else ""
    from ..observability import logs

    logs.summary("prebuild: " + (", ".join(f"{n} {s}" for s, n in sorted(report.counts().items())) or "nothing to do")
                 + f"{where} -> {store.url}", command="prebuild", counts=report.counts(), store=store.url)
    if report.refused:
        raise QueuePayloadError(report.refused[0].detail)
    if report.failed:
        raise BuildFailed(f"{len(report.failed)} of {len(report.outcomes)} entries failed to build")
    if report.held:
        raise BuildsInProgress(f"{held_summary(report.held)} still being built by other workers; "
                               "not everything wanted is built yet")


def _write_metrics(outcomes: list[Outcome], config: Config, push_url: str | None, path: str | None,
                   worker: str | None, run_settings: RunSettings) -> None:
    """Each entry's build seconds and outcome (observability/metrics.py): pushed to a Pushgateway, grouped
    by worker and shard so parallel workers do not overwrite each other, else a textfile."""
    from ..observability import metrics_or_warn

    m = metrics_or_warn("--metrics-push" if push_url else "--metrics-file")
    if m is None:
        return
    import socket

    from ..observability import logs

    try:
        entries = {e.spec.key: (e.spec.backend, e.spec.model, e.spec.shape.label()) for e in config.entries()}
        reg = m.prebuild_registry(outcomes, entries)
        if push_url:
            grouping = {"worker": worker or socket.gethostname(),
                        "shard": run_settings.shard.label() if run_settings.shard else "all"}
            m.push(push_url, reg, "cachekeeper_prebuild", grouping)
        elif path is not None:
            m.write_textfile(path, reg, "--metrics-file")
    except Exception as exc:   # the builds are published; the metrics are a side channel
        logs.warning(f"prebuild metrics: {type(exc).__name__}: {exc}; the run itself is unaffected")


def _progress(o: Outcome) -> None:
    say(f"{o.status:>7}  {o.key[:12]}  {o.label}" + (f"  ({o.seconds:.1f}s)" if o.seconds else "")
        + (f"  [{o.detail}]" if o.status == "held" else ""))
    if o.status in ("failed", "refused"):
        say("         " + o.detail.strip().replace("\n", "\n         ")[-3000:])


@click.command()
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="one JSON line per entry (key, label, spec) on stdout")
def validate(config_path: str, as_json: bool) -> None:
    """Check a config file and print its entries."""
    entries = required_config(config_path).entries()
    for e in entries:
        click.echo(json.dumps({"key": e.spec.key, "entry": e.spec.label(), "spec": e.spec.to_dict()}) if as_json
                   else f"{e.spec.key[:12]}  {e.spec.label()}")
    say(f"{config_path}: valid, {len(entries)} entries")


@click.command()
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="private key file to create")
def keygen(output: str) -> None:
    """Create an ed25519 signing key (PEM, mode 0600) and print its public key for --trusted-key."""
    import os

    from ..errors import DestinationError
    from ..format.signing import SigningKey

    key = SigningKey.generate()
    try:
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise DestinationError(f"{output} exists; keygen never overwrites a key",
                               "choose a new file name for -o/--output", path=output) from None
    except OSError as exc:   # the hint names -o/--output (cli/hints.py path_hint)
        raise DestinationError(f"cannot create {output}: {exc.strerror}", path=output) from None
    with os.fdopen(fd, "wb") as f:
        f.write(key.pem())
    click.echo(str(key.public))
    say(f"keygen: private key -> {output} (key id {key.public.id}); pass the line above to --trusted-key")
