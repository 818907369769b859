"""`cachekeeper prebuild`: the build side of the CLI (queue, leases, shards, parallel builds).

Exit codes: 0 when every wanted entry is built (here or by another worker), 7 when a build failed,
13 when entries are still held by live workers (without --wait), 5 when a queue job was written by
another cachekeeper release, 2 for bad settings.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from . import cli
from .commands import _catalog, _load_config, _say, _store, catalog_option, json_option, store_option


@cli.command()
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@store_option
@catalog_option
@click.option("--no-catalog", is_flag=True, help="publish to the store only (no index, no shared queue)")
@click.option("--backend", "backends", multiple=True, help="only these backends")
@click.option("--model", "models", multiple=True, help="only these models")
@click.option("--only", "only", multiple=True, metavar="KEY", help="only these entry keys (or 12-char prefixes)")
@click.option("--worker", envvar="CACHEKEEPER_WORKER",
              help="worker id in the shared queue (default host:pid) [env CACHEKEEPER_WORKER]")
@click.option("--lease", default=30.0, show_default=True, metavar="SECONDS",
              help="a claimed entry returns to the queue this long after its worker stops renewing it")
@click.option("--heartbeat", default=5.0, show_default=True, metavar="SECONDS",
              help="how often a live worker renews its lease (shorter than --lease)")
@click.option("--wait", is_flag=True, help="wait for entries other live workers are building")
@click.option("--shard", metavar="I/N",
              help="build only shard I of N (N alone: I from JOB_COMPLETION_INDEX or AWS_BATCH_JOB_ARRAY_INDEX)")
@click.option("--workers", type=int, help="parallel builds on this host (default: the config's build.workers)")
@click.option("--verify-store", is_flag=True, help="also check the store for entries the catalog lists as built")
@click.option("--sign-key", envvar="CACHEKEEPER_SIGNING_KEY", type=click.Path(dir_okay=False),
              help="ed25519 private key (PEM) to sign manifests with [env CACHEKEEPER_SIGNING_KEY]")
@json_option
def prebuild(config_path: str, store_url: str | None, catalog_url: str | None, no_catalog: bool,
             backends: tuple[str, ...], models: tuple[str, ...], only: tuple[str, ...], worker: str | None,
             lease: float, heartbeat: float, wait: bool, shard: str | None, workers: int | None,
             verify_store: bool, sign_key: str | None, as_json: bool) -> None:
    """Compile every entry of CONFIG's matrix for this host's toolchains and publish the caches."""
    from ..errors import BuildFailed, BuildsInProgress, QueuePayloadError, UsageError
    from ..worker.lease import LeaseSettings
    from ..worker.prebuild import Outcome, RunSettings, held_summary
    from ..worker.prebuild import prebuild as run
    from ..worker.shard import parse_shard

    settings = RunSettings(lease=LeaseSettings(lease, heartbeat), wait=wait, verify_store=verify_store,
                           worker=worker, shard=parse_shard(shard) if shard else None, workers=workers)
    if workers is not None and workers < 1:
        raise UsageError(f"--workers {workers}: at least one build must run")
    config = _load_config(config_path)
    assert config is not None
    if sign_key:
        from ..signing import SigningKey
        settings = RunSettings(**{**settings.__dict__, "signing_key": SigningKey.load(Path(sign_key))})
    store = _store(store_url, config, create=True)
    catalog = None if no_catalog else _catalog(catalog_url, config)

    def progress(o: Outcome) -> None:
        _say(f"{o.status:>7}  {o.key[:12]}  {o.label}" + (f"  ({o.seconds:.1f}s)" if o.seconds else "")
             + (f"  [{o.detail}]" if o.status == "held" else ""))
        if o.status in ("failed", "refused"):
            _say("         " + o.detail.strip().replace("\n", "\n         ")[-3000:])

    report = run(config, store, catalog=catalog, backends=set(backends) or None, models=set(models) or None,
                 only=set(only) or None, settings=settings, progress=progress)
    if as_json:
        click.echo(json.dumps({"counts": report.counts(), "outcomes": [o.__dict__ for o in report.outcomes],
                               "swept_workdirs": [str(p) for p in report.swept]}))
    if report.swept:
        _say(f"prebuild: removed {len(report.swept)} workdirs of dead workers")
    where = f" (shard {settings.shard.label()})" if settings.shard else ""
    _say("prebuild: " + (", ".join(f"{n} {s}" for s, n in sorted(report.counts().items())) or "nothing to do")
         + f"{where} -> {store.url}")
    if report.refused:
        raise QueuePayloadError(report.refused[0].detail)
    if report.failed:
        raise BuildFailed(f"{len(report.failed)} of {len(report.outcomes)} entries failed to build")
    if report.held:
        raise BuildsInProgress(f"{held_summary(report.held)} still being built by other workers; "
                               "not everything wanted is built yet")
