"""Core commands: prebuild, hydrate, lock, validate, and the inspection set (ls, show, coverage, verify,
gc, stats). Heavy imports stay inside the functions: `hydrate` must start in a fraction of a second."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from . import cli
from .hydrate_output import progress_line, summarize

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..catalog import Catalog
    from ..config import Config, PlannedEntry
    from ..fingerprint import Fingerprint
    from ..signing import PublicKey
    from ..stores.base import Store

store_option = click.option("--store", "store_url", envvar="CACHEKEEPER_STORE", metavar="URL",
                            help="file:///dir, s3://bucket/prefix or gs://bucket/prefix [env CACHEKEEPER_STORE]")
catalog_option = click.option("--catalog", "catalog_url", envvar="CACHEKEEPER_CATALOG", metavar="URL",
                              help="sqlite:///file or postgresql+psycopg://... [env CACHEKEEPER_CATALOG]")
json_option = click.option("--json", "as_json", is_flag=True, help="machine-readable output on stdout")


def _say(msg: str) -> None:
    click.echo(msg, err=True)


def _load_config(path: str | None) -> Config | None:
    if path is None:
        return None
    from ..config import load_config
    return load_config(path)


def _store(url: str | None, config: Config | None, *, create: bool = False) -> Store:
    from ..stores import open_store
    return open_store(url or (config.store if config else None), create=create)


def _catalog(url: str | None, config: Config | None) -> Catalog:
    from ..catalog import Catalog
    return Catalog.open(url or (config.catalog if config else None))


def _options(config: Config | None, backend: str, pairs: tuple[str, ...], device: str | None) -> dict[str, str]:
    from ..errors import UsageError
    options = config.options_for(backend) if config else {}
    for pair in pairs:
        k, sep, v = pair.partition("=")
        if not sep or not k:
            raise UsageError(f"--option expects KEY=VALUE, got {pair!r}")
        options[k] = v
    if device:
        options["device"] = device
    return options


def _pick_backend(config: Config | None, backend: str | None) -> str:
    from ..errors import UsageError
    if backend:
        return backend
    names = sorted({b for m in config.models for b in m.backends}) if config else []
    if len(names) == 1:
        return names[0]
    raise UsageError("which backend? pass --backend" + (f" (the config names {', '.join(names)})" if names else ""))


def _local_toolchain(config: Config | None, backend_name: str, pairs: tuple[str, ...],
                     device: str | None) -> tuple[Backend, Fingerprint, dict[str, str]]:
    from ..backends import get_backend
    from ..errors import BackendUnavailable
    backend = get_backend(backend_name)
    options = _options(config, backend_name, pairs, device)
    reason = backend.unavailable_reason(options)
    if reason:
        raise BackendUnavailable(f"backend {backend_name} is not usable on this host: {reason}")
    return backend, backend.fingerprint(options), options


# --- hydrate -----------------------------------------------------------------------------------------


@cli.command()
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
@json_option
def hydrate(config_path: str | None, lockfile: str | None, backend: str | None, models: tuple[str, ...],
            shapes: tuple[str, ...], dest: str | None, device: str | None, pairs: tuple[str, ...],
            store_url: str | None, print_env: bool, verify: bool, require_all: bool, threads: int,
            trusted_keys: tuple[str, ...], deadline: float | None, best_effort: bool, as_json: bool) -> None:
    """Fill this host's cache dir with the prebuilt artifacts it can use (no torch, no database)."""
    from ..hydrate import hydrate as run
    from ..hydrate.resolve import Pin, read_lockfile
    from ..stores import default_home

    config = _load_config(config_path)
    pins: list[Pin] | None = None
    locked_fp = None
    if lockfile:
        backend, locked_fp, pins = read_lockfile(Path(lockfile))
    name = _pick_backend(config, backend)
    be, fp, options = _local_toolchain(config, name, pairs, device)
    if locked_fp is not None and locked_fp != fp.id:
        from ..errors import ToolchainMismatch
        raise ToolchainMismatch(f"{lockfile} pins toolchain {locked_fp}; this host is {fp.id}",
                                "regenerate the lockfile on a host like this one (`cachekeeper lock`)")
    if config is not None and pins is None:
        entries = _only_shapes(config.entries({name}, set(models) or None), shapes, config.source)
        pins = [Pin(e.spec.key, kind="entry") for e in entries]
    target = Path(dest) if dest else default_home() / "hydrated" / f"{name}-{fp.id}"
    exports = be.env_exports(target.absolute())  # before any download: it refuses env that would ignore the dir
    report = run(open_store=lambda: _store(store_url, config), fingerprint=fp, dest=target,
                 extra_roots=be.extra_roots(options), pins=pins, models=set(models) or None, verify=verify,
                 require_all=require_all, threads=threads, trusted=_trusted(trusted_keys),
                 deadline=deadline if deadline is not None else (config.hydrate_deadline if config else None),
                 best_effort=best_effort or bool(config and config.hydrate_best_effort), progress=progress_line())
    if as_json:
        doc = report.to_dict()
        from ..fleet import hydrate_counts
        doc["counts"] = hydrate_counts(report.manifests, report.missing)
        if report.missing and not report.incomplete:   # why each miss, as `explain` says it (no DB)
            from ..inspection.explain import explain_misses
            labels = {e.spec.key: e.spec.label() for e in config.entries({name})} if config else {}
            doc["explanations"] = explain_misses(lambda: _store(store_url, config), fp, report.missing, labels)
        click.echo(json.dumps(doc))
    if print_env:
        for var, value in exports.items():
            click.echo(f"export {var}={_shell_quote(value)}")
    if report.missing:
        _say(f"warning: {len(report.missing)} wanted entries are not built for toolchain {fp.id}; "
             "they will compile at first use (`cachekeeper coverage` lists them)")
    if report.incomplete:
        _say(f"warning: hydrate incomplete ({report.incomplete}); the server compiles what is missing")
    summarize(report)


def _only_shapes(entries: list[PlannedEntry], shapes: tuple[str, ...], source: str) -> list[PlannedEntry]:
    """Keep entries of the named shapes; a shape the config does not declare is an error, not a miss."""
    from ..errors import ConfigError

    if not shapes:
        return entries
    declared = sorted({e.spec.shape.label() for e in entries})
    unknown = [s for s in shapes if s not in declared]
    if unknown:
        raise ConfigError(f"{source} declares no shape {', '.join(unknown)} (it declares {', '.join(declared)})",
                          "add the shape to the config and prebuild it; static-shape backends compile per shape")
    return [e for e in entries if e.spec.shape.label() in shapes]


def _trusted(keys: tuple[str, ...]) -> tuple[PublicKey, ...]:
    if not keys:
        return ()
    from ..signing import PublicKey
    return tuple(PublicKey.parse(k) for k in keys)


@cli.command()
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="private key file to create")
def keygen(output: str) -> None:
    """Create an ed25519 signing key (PEM, mode 0600) and print its public key for --trusted-key."""
    import os

    from ..errors import DestinationError
    from ..signing import SigningKey

    key = SigningKey.generate()
    try:
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise DestinationError(f"cannot create {output}: {exc.strerror}", "choose a new file name") from None
    with os.fdopen(fd, "wb") as f:
        f.write(key.pem())
    click.echo(str(key.public))
    _say(f"keygen: private key -> {output} (key id {key.public.id}); pass the line above to --trusted-key")


def _shell_quote(value: str) -> str:
    import shlex
    return shlex.quote(value)


@cli.command()
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
    from ..errors import NothingToHydrate
    from ..hydrate.resolve import Pin, fetch_manifests, with_shared, write_lockfile

    config = _load_config(config_path)
    assert config is not None
    name = _pick_backend(config, backend)
    _, fp, _ = _local_toolchain(config, name, pairs, device)
    store = _store(store_url, config)
    found, missing = fetch_manifests(store, fp, [Pin(e.spec.key) for e in config.entries({name}, set(models) or None)])
    if not found:
        raise NothingToHydrate(f"{store.url} has no entries of this config for toolchain {fp.id}")
    write_lockfile(Path(output), name, fp, with_shared(store, fp, found))
    _say(f"lock: {len(found)} entries pinned ({len(missing)} not built) -> {output}")


@cli.command()
@click.argument("config_path", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="one JSON line per entry (key, label, spec) on stdout")
def validate(config_path: str, as_json: bool) -> None:
    """Check a config file and print its entries."""
    config = _load_config(config_path)
    assert config is not None
    entries = config.entries()
    for e in entries:
        click.echo(json.dumps({"key": e.spec.key, "entry": e.spec.label(), "spec": e.spec.to_dict()}) if as_json
                   else f"{e.spec.key[:12]}  {e.spec.label()}")
    _say(f"{config_path}: valid, {len(entries)} entries")


# --- inspection --------------------------------------------------------------------------------------


def _rows_json(rows: list[Any]) -> str:
    return json.dumps([r.__dict__ for r in rows], default=str)


def _ls_stream(catalog: Catalog, fingerprint_id: str | None, backend: str | None, model: str | None, kind: str,
               as_json: bool) -> None:
    """Entries written as the database hands them over, in batches: constant memory at any size."""
    from ..catalog.listing import written

    lines = catalog.listing(fingerprint_id=fingerprint_id, backend=backend, model=model, kind=kind, as_json=as_json)
    n = written(lines, sys.stdout)
    sys.stdout.flush()
    if not as_json:
        _say(f"{n} entries")


@cli.command(name="ls")
@click.option("--backend")
@click.option("--model")
@click.option("--fingerprint", "fingerprint_id")
@click.option("--captured", is_flag=True, help="list captured sets (runtime compiles written back), not entries")
@catalog_option
@json_option
def ls_(backend: str | None, model: str | None, fingerprint_id: str | None, captured: bool, catalog_url: str | None,
        as_json: bool) -> None:
    """List cached entries (from the catalog). --json: one JSON object per line, streamed."""
    from ..manifest import KIND_CAPTURED, KIND_ENTRY
    kind = KIND_CAPTURED if captured else KIND_ENTRY
    if as_json or not captured:
        _ls_stream(_catalog(catalog_url, None), fingerprint_id, backend, model, kind, as_json)
        return
    rows = _catalog(catalog_url, None).find(fingerprint_id=fingerprint_id, backend=backend, model=model, kind=kind)
    if captured:
        for r in rows:
            click.echo(f"{r.fingerprint_id}  {r.name}  {r.backend:<8} captured  {r.total_size / 1e6:8.1f} MB  "
                       f"{r.file_count} files  host {r.build.get('host', '?')} at {r.build.get('time', '?')}")
        _say(f"{len(rows)} captured sets")
        return
    for r in rows:
        click.echo(f"{r.fingerprint_id}  {r.name[:12]}  {r.backend:<8} {r.model}/{r.component} {r.mode} "
                   f"{r.height}x{r.width}x{r.batch} {r.dtype}  {r.total_size / 1e6:8.1f} MB  {r.file_count} files")
    _say(f"{len(rows)} entries")


@cli.command()
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
    from ..manifest import KIND_CAPTURED, captured_prefix, manifest_key

    config = _load_config(config_path)
    assert config is not None
    names = [backend] if backend else sorted({b for m in config.models for b in m.backends})
    rows: list[dict[str, Any]] = []
    captured: dict[str, int] = {}  # fingerprint -> captured sets: runtime compiles the config does not prebuild
    for name in names:
        fp_id = fingerprint_id or _local_toolchain(config, name, pairs, device)[1].id
        entries = config.entries({name})
        if no_catalog:
            store = _store(store_url, config)
            built = {e.spec.key for e in entries if store.exists(manifest_key(fp_id, e.spec.key))}
            captured[fp_id] = sum(1 for k in store.list(captured_prefix(fp_id)) if k.endswith(".json"))
        else:
            index = _catalog(catalog_url, config)
            built = set(index.lookup(fp_id, [e.spec.key for e in entries]))
            captured[fp_id] = len(index.find(fingerprint_id=fp_id, kind=KIND_CAPTURED))
        rows += [{"backend": name, "fingerprint_id": fp_id, "key": e.spec.key, "entry": e.spec.label(),
                  "built": e.spec.key in built} for e in entries]
    missing = [r for r in rows if not r["built"]]
    if as_json:
        click.echo(json.dumps({"entries": rows, "missing": len(missing), "captured": captured}))
    else:
        for r in rows:
            state = "built  " if r["built"] else "MISSING"
            click.echo(f"{state}  {r['fingerprint_id']}  {r['key'][:12]}  {r['entry']}")
        for fp_id, n in sorted(captured.items()):
            if n:
                click.echo(f"captured {fp_id}  {n} sets of runtime compiles (`cachekeeper ls --captured`)")
    _say(f"coverage: {len(rows) - len(missing)}/{len(rows)} entries built"
         + (f", {sum(captured.values())} captured sets" if any(captured.values()) else ""))
    if missing:
        sys.exit(1)


@cli.command()
@catalog_option
@json_option
def stats(catalog_url: str | None, as_json: bool) -> None:
    """Entries and sizes per toolchain (from the catalog)."""
    rows = _catalog(catalog_url, None).fingerprints()
    if as_json:
        click.echo(_rows_json(rows))
        return
    for r in rows:
        click.echo(f"{r.id}  {r.backend:<8} {r.entries:5d} entries  {r.captured:5d} captured  "
                   f"{r.total_size / 1e6:10.1f} MB")
