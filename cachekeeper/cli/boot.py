"""The boot side of the CLI: `hydrate` (fill this host's cache dir), `lock` (pin what it would hydrate) and
`env` (the variables that point a runtime at the hydrated dir, for boot integrations).

`hydrate` must start in a fraction of a second and never import torch, SQLAlchemy or a cloud SDK it does
not use: everything heavy is imported inside the commands. What a hydrate asks for (backend, toolchain,
pins, dest) is resolved by `hydration/request.py`, the same functions the Python API calls; how it runs is
one `HydrateOptions` (config/hydrate.py): each of its settings is an option here of the same name, given
over the config's `hydrate:` section (tests/hydration/test_hydrate_options.py walks them).
"""

from __future__ import annotations

import contextlib
import gc
import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .. import bounds, settings
from ..config.hydrate import ENV_FORMATS, LINK_MODES
from ..fs.durability import MODES as DURABILITY_MODES
from .hydrate_output import progress_line, summarize
from .node_options import bytes_option, count_option, source_of
from .options import (
    backend_pairs,
    excludes,
    load_config,
    needs,
    number,
    opened_store,
    required_config,
    say,
    store_option,
    toolchain,
)

if TYPE_CHECKING:
    from ..hydration.engine import HydrateReport
    from ..hydration.request import HydrateRequest

FORMATS = ENV_FORMATS


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="hydrate the entries this config names")
@click.option("--lockfile", type=click.Path(), help="hydrate exactly the manifests a lockfile pins")
@click.option("--backend", help="backend (default: the config's or lockfile's only one)")
@click.option("--model", "models", multiple=True, help="only these models")
@click.option("--shape", "shapes", multiple=True, metavar="HxWxB", help="only these compiled shapes of the config")
@click.option("--dest", type=click.Path(), help="cache dir to fill; the env names its <fingerprint>/ subdir "
              "(default: a per-backend dir under CACHEKEEPER_HOME)")
@click.option("--device", help="device the inference runs on (cpu, cuda), for the fingerprint")
@click.option("--option", "pairs", multiple=True, metavar="KEY=VALUE", help="backend option for the fingerprint")
@store_option
@click.option("--print-env", is_flag=True, help="print `export VAR=DIR` lines for eval")
@click.option("--verify", is_flag=True, help="re-hash every local file instead of trusting the state file")
@click.option("--require-all", is_flag=True, help="fail if any wanted entry is not built for this toolchain")
@number("--threads", bound=bounds.THREADS, default=16, show_default=True, help="parallel downloads")
@click.option("--trusted-key", "trusted_keys", multiple=True, envvar=settings.TRUSTED_KEYS.name, metavar="KEY",
              help="builder key: accept only prebuilt manifests signed by this ed25519 public key "
              "[env CACHEKEEPER_TRUSTED_KEYS]")
@click.option("--capture-key", "capture_keys", multiple=True, envvar=settings.CAPTURE_KEYS.name, metavar="KEY",
              help="accept captured sets signed by this serving host's key (never prebuilt manifests); "
              "without one, captured sets are skipped when builder keys are set [env CACHEKEEPER_CAPTURE_KEYS]")
@number("--deadline", bound=bounds.DEADLINE, envvar=settings.DEADLINE.name,
        help="bound the whole hydrate, a stalled store included; then keep what is "
        "placed and exit 11 [env CACHEKEEPER_DEADLINE]")
@click.option("--best-effort", is_flag=True, envvar=settings.BEST_EFFORT.name,
              help="when nothing is built for this toolchain, the deadline runs out or the store fails, warn, "
              "print the env and exit 0 (the server compiles what is missing) [env CACHEKEEPER_BEST_EFFORT]")
@click.option("--node-cache", envvar=settings.NODE_CACHE.name, metavar="DIR",
              help="keep verified blobs once per node here and fill the dest from them [env CACHEKEEPER_NODE_CACHE]")
@click.option("--node-cache-link", type=click.Choice(LINK_MODES), default="auto", show_default=True,
              envvar=settings.NODE_CACHE_LINK.name,
              help="how dest files share the node cache's copy (auto: reflink, else a read-only hardlink "
              "unless root, else copy) [env CACHEKEEPER_NODE_CACHE_LINK]")
@click.option("--node-cache-max-bytes", "node_cache_max_bytes", envvar=settings.NODE_CACHE_MAX_BYTES.name,
              metavar="BYTES",
              help="the node cache's budget (e.g. 200G); least recently used blobs no dest links go first")
@click.option("--max-bytes", "max_bytes", envvar=settings.MAX_BYTES.name, metavar="BYTES",
              help="the dest's budget (e.g. 50G); entries not wanted now go by last use [env CACHEKEEPER_MAX_BYTES]")
@click.option("--durability", type=click.Choice(DURABILITY_MODES), envvar=settings.DURABILITY.name,
              help="fsync each file, or trust the state file only within this boot (the default), or both "
              "[env CACHEKEEPER_DURABILITY]")
@click.option("--ready-after", "ready_after", envvar=settings.READY_AFTER.name, metavar="N",
              help="write the env and <dest>/.cachekeeper/ready once the first N entries (by priority) are "
              "in place, then hydrate the rest [env CACHEKEEPER_READY_AFTER]")
@click.option("--env-file", type=click.Path(dir_okay=False), metavar="FILE",
              help="write the env here when ready, before the ready marker")
@click.option("--env-format", type=click.Choice(FORMATS), default="shell", show_default=True,
              help="--env-file as a shell sources it, or as a systemd EnvironmentFile=")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output on stdout")
@click.option("--metrics-file", envvar=settings.METRICS_FILE.name, metavar="PATH",
              help="write the run's metrics here in node_exporter's textfile format, atomically; a failure is a "
              "warning, never the boot's (config hydrate.metrics_file) [env CACHEKEEPER_METRICS_FILE]")
def hydrate(config_path: str | None, lockfile: str | None, backend: str | None, models: tuple[str, ...],
            shapes: tuple[str, ...], dest: str | None, device: str | None, pairs: tuple[str, ...],
            store_url: str | None, print_env: bool, as_json: bool, **flags: Any) -> None:
    """Fill this host's cache dir with the prebuilt artifacts it can use (no torch, no database)."""
    from ..api import run_hydrate
    from ..errors import UsageError
    from ..hydration.request import resolve_request, settled

    settings.STALL_TIMEOUT.get()   # checked at the edge, before any work (the store reader reads it)
    needs("env_format", "env_file")
    excludes("models", "lockfile", "a lockfile pins exact manifests; --model selects entries of a config")
    if as_json and print_env:
        raise UsageError("--json and --print-env both write stdout; pick one (`cachekeeper env` writes the env "
                         "to a file)")
    given = _given(flags)
    config = load_config(config_path)
    from_config = config is not None and config.hydrate.node_cache is not None
    needs("node_cache_link", "node_cache", met=from_config)
    needs("node_cache_max_bytes", "node_cache", met=from_config)
    options = settled(config, **given)
    req = resolve_request(config=config, lockfile=lockfile, backend=backend, models=models,
                          shapes=shapes, device=device, options=backend_pairs(pairs), dest=dest, store_url=store_url,
                          best_effort=options.best_effort)
    with collector_paused():
        report, exports = run_hydrate(req, options, progress_line(), models)
    explained = _explanations(report, req)
    if as_json:
        doc = _report_json(report)
        doc["env"] = exports
        if explained is not None:
            doc["explanations"] = explained
        click.echo(json.dumps(doc))
    if print_env:
        for var, value in exports.items():
            click.echo(f"export {var}={shlex.quote(value)}")
    warning = _warning(report, explained)
    if warning:
        say(f"warning: {warning}")
    for line in report.warnings:
        say(f"warning: {line}")
    summarize(report)


def _given(flags: dict[str, Any]) -> dict[str, Any]:
    """The hydrate settings typed as a flag or set by an env var (a click default is not given: the
    config's setting stays), each parsed where it entered, so that an error names the flag or the variable."""
    from click.core import ParameterSource

    from ..config.hydrate import spec_of

    ctx = click.get_current_context()
    out: dict[str, Any] = {}
    for name, value in flags.items():
        if value is None or ctx.get_parameter_source(name) in (ParameterSource.DEFAULT, None):
            continue
        param = next(p for p in ctx.command.params if p.name == name)
        flag, env = max(param.opts, key=len), param.envvar if isinstance(param.envvar, str) else None
        kind = spec_of(name).kind
        if name == "node_cache":
            value = _dir_option(name, flag, env, value)
        elif kind == "bytes":
            value = bytes_option(name, flag, env, value)
        elif kind == "count":
            value = count_option(name, flag, env, value)
        out[name] = value
    return out


def _dir_option(param: str, flag: str, env: str | None, value: str) -> str:
    """A directory option: empty or an existing non-directory is refused where it enters."""
    from ..errors import UsageError

    where = source_of(param, flag, env)
    if not value.strip():
        raise UsageError(f"{where} must name a directory, got an empty value")
    if Path(value).exists() and not Path(value).is_dir():
        raise UsageError(f"{where} {value} exists and is not a directory")
    return value


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic GC while a hydrate fetches: the plan's objects are long-lived and the fetch makes no
    cycles, yet each collection walked them all (a tenth of the hydrate's CPU); reference counting still
    frees. Paused here, in the CLI's own process, never inside the library, which a serving process calls
    through `cachekeeper.hydrate` while its other threads allocate."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _report_json(report: HydrateReport) -> dict[str, object]:
    """The report and the fleet figures (`explanations` are added when something missed)."""
    from ..reports.fleet import hydrate_counts

    doc = report.to_dict()
    doc["counts"] = hydrate_counts(report.manifests, report.missing)
    return doc


def _explanations(report: HydrateReport, req: HydrateRequest) -> list[dict[str, Any]] | str | None:
    """Why each miss missed, as `explain` says it, read from the store listing (no database): only when
    something missed and the store answered (a dead store or a spent deadline is not asked again)."""
    if not report.missing or (report.incomplete and not report.nothing_built):
        return None
    from ..hydration.request import store_opener
    from ..inspection.explain import explain_misses

    config, name = req.config, req.toolchain.name
    labels = {e.spec.key: e.spec.label() for e in config.entries({name})} if config else {}
    return explain_misses(store_opener(req.store_url, config), req.toolchain.fingerprint, report.missing, labels)


def _warning(report: HydrateReport, explained: list[dict[str, Any]] | str | None) -> str:
    """The one warning line of a run that boots anyway: why, and the first cause `explain` names."""
    cause = ""
    if isinstance(explained, list):
        hints = [h for e in explained for n in e["nearest"] for h in n["hints"]]
        cause = f"; cause: {hints[0]}" if hints else "; no toolchain has them built"
    if report.incomplete:
        return f"hydrate incomplete ({report.incomplete}){cause}; the server compiles what is missing"
    if report.missing:
        return (f"{len(report.missing)} wanted entries are not built for toolchain {report.fingerprint_id}{cause}; "
                "they will compile at first use (`cachekeeper coverage` lists them)")
    return ""


@click.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False))
@click.option("--backend")
@click.option("--model", "models", multiple=True)
@click.option("--device")
@click.option("--option", "pairs", multiple=True, metavar="KEY=VALUE")
@store_option
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="lockfile to write")
def lock(config_path: str, backend: str | None, models: tuple[str, ...], device: str | None,
         pairs: tuple[str, ...], store_url: str | None, output: str) -> None:
    """Pin the exact manifests this host's toolchain would hydrate into a lockfile."""
    from ..hydration.resolve import lock_entries

    config = required_config(config_path)
    tc = toolchain(config, backend, pairs, device)
    with opened_store(store_url, config) as store:
        locked = lock_entries(Path(output), config, tc, store, models)
    say(f"lock: {locked.pinned} entries pinned ({locked.not_built} not built) -> {output}")


@click.command(name="env")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="the config hydrate used")
@click.option("--backend", help="backend (default: the config's only one)")
@click.option("--dest", type=click.Path(file_okay=False), help="the hydrated dir (default: as hydrate's)")
@click.option("--device", help="device the inference runs on (as hydrate)")
@click.option("--option", "pairs", multiple=True, metavar="KEY=VALUE", help="backend option (as hydrate)")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="shell", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="write this file atomically instead of stdout")
def env(config_path: str | None, backend: str | None, dest: str | None, device: str | None,
        pairs: tuple[str, ...], fmt: str, output: str | None) -> None:
    """Print (or write) the variables that make this host's runtime read the hydrated DEST.

    `hydrate --print-env` prints them for `eval`; this writes them as a file another process reads: a
    systemd `EnvironmentFile=` (`--format systemd`) or a file a container's shell sources (`--format shell`)."""
    from ..api import env as exports_for
    from ..fs.atomic import atomic_write_bytes
    from ..hydration.ready import render

    text = render(exports_for(config=config_path, backend=backend, dest=dest, device=device,
                              options=backend_pairs(pairs)), fmt)
    if output is None:
        click.echo(text, nl=False)
    else:
        atomic_write_bytes(Path(output), text.encode())
