"""The boot side of the CLI: `hydrate` (fill this host's cache dir), `lock` (pin what it would hydrate) and
`env` (the variables that point a runtime at the hydrated dir, for boot integrations).

`hydrate` must start in a fraction of a second and never import torch, SQLAlchemy or a cloud SDK it does
not use: everything heavy is imported inside the commands. What a hydrate asks for (backend, toolchain,
pins, dest) is resolved by `boot/request.py`, the same functions the Python API calls.
"""

from __future__ import annotations

import contextlib
import gc
import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .hydrate_output import progress_line, summarize
from .options import backend_pairs, load_config, opened_store, required_config, say, store_option, toolchain

if TYPE_CHECKING:
    from ..boot.hydrate import HydrateReport
    from ..boot.request import HydrateRequest

FORMATS = ("shell", "systemd")


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="hydrate the entries this config names")
@click.option("--lockfile", type=click.Path(dir_okay=False), help="hydrate exactly the manifests a lockfile pins")
@click.option("--backend", help="backend (default: the config's or lockfile's only one)")
@click.option("--model", "models", multiple=True, help="only these models")
@click.option("--shape", "shapes", multiple=True, metavar="HxWxB", help="only these compiled shapes of the config")
@click.option("--dest", type=click.Path(), help="cache dir to fill (default: per-toolchain dir)")
@click.option("--device", help="device the inference runs on (cpu, cuda), for the fingerprint")
@click.option("--option", "pairs", multiple=True, metavar="KEY=VALUE", help="backend option for the fingerprint")
@store_option
@click.option("--print-env", is_flag=True, help="print `export VAR=DIR` lines for eval")
@click.option("--verify", is_flag=True, help="re-hash every local file instead of trusting the state file")
@click.option("--require-all", is_flag=True, help="fail if any wanted entry is not built for this toolchain")
@click.option("--threads", default=16, show_default=True)
@click.option("--trusted-key", "trusted_keys", multiple=True, envvar="CACHEKEEPER_TRUSTED_KEYS", metavar="KEY",
              help="accept only manifests signed by this ed25519 public key [env CACHEKEEPER_TRUSTED_KEYS]")
@click.option("--deadline", type=click.FloatRange(min=0, min_open=True), envvar="CACHEKEEPER_DEADLINE",
              metavar="SECONDS", help="bound the whole hydrate, a stalled store included; then keep what is "
              "placed and exit 11 [env CACHEKEEPER_DEADLINE]")
@click.option("--best-effort", is_flag=True, envvar="CACHEKEEPER_BEST_EFFORT",
              help="when the deadline runs out or the store fails, warn, print the env and exit 0 "
              "(the server compiles what is missing) [env CACHEKEEPER_BEST_EFFORT]")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output on stdout")
def hydrate(config_path: str | None, lockfile: str | None, backend: str | None, models: tuple[str, ...],
            shapes: tuple[str, ...], dest: str | None, device: str | None, pairs: tuple[str, ...],
            store_url: str | None, print_env: bool, verify: bool, require_all: bool, threads: int,
            trusted_keys: tuple[str, ...], deadline: float | None, best_effort: bool, as_json: bool) -> None:
    """Fill this host's cache dir with the prebuilt artifacts it can use (no torch, no database)."""
    from ..boot.request import resolve_request, run_request

    req = resolve_request(config=load_config(config_path), lockfile=lockfile, backend=backend, models=models,
                          shapes=shapes, device=device, options=backend_pairs(pairs), dest=dest, store_url=store_url)
    with collector_paused():
        report, exports = run_request(req, verify=verify, require_all=require_all, threads=threads,
                                      trusted=trusted_keys, deadline=deadline, best_effort=best_effort,
                                      progress=progress_line())
    if as_json:
        click.echo(json.dumps(_report_json(report, req)))
    if print_env:
        for var, value in exports.items():
            click.echo(f"export {var}={shlex.quote(value)}")
    if report.missing:
        say(f"warning: {len(report.missing)} wanted entries are not built for toolchain {report.fingerprint_id}; "
            "they will compile at first use (`cachekeeper coverage` lists them)")
    if report.incomplete:
        say(f"warning: hydrate incomplete ({report.incomplete}); the server compiles what is missing")
    summarize(report)


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


def _report_json(report: HydrateReport, req: HydrateRequest) -> dict[str, object]:
    """The report, the fleet figures, and why each miss missed, as `explain` says it (no database)."""
    from ..boot.fleet import hydrate_counts
    from ..boot.request import store_opener

    doc = report.to_dict()
    doc["counts"] = hydrate_counts(report.manifests, report.missing)
    if report.missing and not report.incomplete:
        from ..inspection.explain import explain_misses

        config, name = req.config, req.toolchain.name
        labels = {e.spec.key: e.spec.label() for e in config.entries({name})} if config else {}
        doc["explanations"] = explain_misses(store_opener(req.store_url, config), req.toolchain.fingerprint,
                                             report.missing, labels)
    return doc


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
    from ..boot.resolve import Pin, fetch_manifests, with_shared, write_lockfile
    from ..errors import NothingToHydrate
    from ..presence import look_up

    config = required_config(config_path)
    tc = toolchain(config, backend, pairs, device)
    fp = tc.fingerprint
    keys = [e.spec.key for e in config.entries({tc.name}, set(models) or None)]
    with opened_store(store_url, config) as store:
        # One listing says what is built; only those manifests are read (no GET that would 404).
        presence = look_up(fp.id, keys, store=store)
        found, gone = fetch_manifests(store, fp, [Pin(k) for k in presence.built])
        if not found:
            raise NothingToHydrate(f"{store.url} has no entries of this config for toolchain {fp.id}",
                                   url=store.url, fingerprint=fp.id)
        write_lockfile(Path(output), tc.name, fp, with_shared(store, fp, found))
    say(f"lock: {len(found)} entries pinned ({len(presence.missing) + len(gone)} not built) -> {output}")


def render(exports: dict[str, str], fmt: str) -> str:
    if fmt == "systemd":
        # EnvironmentFile= syntax: double quotes with backslash escapes; systemd never expands $ there.
        quoted = {k: '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for k, v in exports.items()}
        return "".join(f"{k}={v}\n" for k, v in sorted(quoted.items()))
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(exports.items()))


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

    text = render(exports_for(config=config_path, backend=backend, dest=dest, device=device,
                              options=backend_pairs(pairs)), fmt)
    if output is None:
        click.echo(text, nl=False)
    else:
        atomic_write_bytes(Path(output), text.encode())
