"""`cachekeeper doctor`: which backends this host can use, its toolchain fingerprint for each, the cache dir
the runtime would read, and environment settings that would make hydrated artifacts go unused.

Never imports torch: backends answer with light probes only (importlib.metadata, env, sysfs).
The command is attached to the main group by the CLI module (`cli.add_command(doctor)`).
"""

from __future__ import annotations

import json
import os
from typing import Any

import click

from ..errors import BackendUnavailable, CachekeeperError, UsageError


def _backend_names() -> list[str]:
    from ..backends import registry  # built in, plus plugins from CACHEKEEPER_BACKENDS

    return sorted(registry())


def _cache_dir(backend: Any) -> dict[str, str | None]:
    value = os.environ.get(backend.env_var)
    if value:
        return {"path": value, "source": f"env {backend.env_var}"}
    # `default_cache_dir`: the runtime's own default, None when it keeps no cache unless told where.
    default = backend.default_cache_dir
    if default:
        return {"path": str(default), "source": "runtime default"}
    return {"path": None, "source": f"{backend.env_var} unset: the runtime keeps no persistent cache"}


def check_backend(name: str, options: dict[str, str]) -> dict[str, Any]:
    """One backend's report; every failure of the backend becomes a `reason`, never an exception (a plugin's
    stray exception too: the registry turns it into BackendUnavailable naming the plugin)."""
    from ..backends import get_backend

    row: dict[str, Any] = {"backend": name, "usable": False, "reason": None, "fingerprint": None,
                           "env_var": None, "cache_dir": None, "warnings": [], "device": None}
    try:
        backend = get_backend(name)
    except (ImportError, AttributeError) as exc:
        row["reason"] = f"backend module cannot be loaded: {exc}"
        return row
    try:
        _probe(backend, options, row)
    except CachekeeperError as exc:  # a backend's own reason, without the backend name doctor shows anyway
        row["reason"] = (exc.reason if isinstance(exc, BackendUnavailable) else None) or exc.message
    return row


def _probe(backend: Any, options: dict[str, str], row: dict[str, Any]) -> None:
    row["env_var"] = backend.env_var
    row["cache_dir"] = _cache_dir(backend)
    reason = backend.unavailable_reason(options)
    if reason:
        row["reason"] = reason
        return
    row["warnings"] = backend.env_warnings(options)
    # Hydrating needs no device; building and serving do: say so, by the runtime's own rule.
    row["device"] = backend.device_reason(options)
    fp = backend.fingerprint(options)
    row["usable"] = True
    row["fingerprint"] = {"id": fp.id, "fields": dict(fp.fields)}


def _serve_env(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in items:
        var, sep, value = item.partition("=")
        if not sep or not var or any(c in var for c in " \t\n="):
            raise UsageError(f"--serve-env: expected VAR=VALUE, got {item!r}")
        out[var] = value
    return out


def _device_check(names: list[str], options_of: Any, config: Any, mode: str, model_dir: str | None,
                  serve_env: tuple[str, ...], as_json: bool) -> None:
    """`--device-check`: the round trip on this host's device, judged by the runtime's own counters."""
    from pathlib import Path

    from ..admin.device_check import run_device_check
    from ..backends import get_backend, modes_for

    if len(names) != 1:
        raise UsageError("--device-check checks one backend: name it with --backend")
    env = _serve_env(serve_env)
    backend = get_backend(names[0])
    if mode not in modes_for(backend.name):
        raise UsageError(f"--mode: {backend.name} has no mode {mode!r} (one of {', '.join(modes_for(backend.name))})")
    check = run_device_check(backend, options_of(config, backend.name), mode=mode,
                             model=Path(model_dir) if model_dir else None, serve_env=env)
    if as_json:
        click.echo(json.dumps(check.to_json(), indent=1, sort_keys=True))
    else:
        for line in check.lines():
            click.echo(line)
    if (failure := check.failure()) is not None:
        raise failure
    if not as_json:
        click.echo("  ok: the server compiled nothing and wrote nothing; run this again after every toolchain "
                   "upgrade")


def _echo_text(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        status = "usable" if row["usable"] else f"not usable: {row['reason']}"
        click.echo(f"{row['backend']}: {status}")
        if row["fingerprint"]:
            click.echo(f"  fingerprint {row['fingerprint']['id']}")
            for k, v in row["fingerprint"]["fields"].items():
                click.echo(f"    {k} = {v}")
        if row["cache_dir"]:
            cd = row["cache_dir"]
            click.echo(f"  cache dir: {cd['path'] or '-'} ({cd['source']})")
        if row.get("device"):
            click.echo(f"  device: {row['device']} (hydrate works; builds and servers need the device)")
        for w in row["warnings"]:
            click.echo(f"  warning: {w}")


@click.command()
@click.option("--backend", "backends", multiple=True, help="check only this backend (repeatable)")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, exists=True),
              help="config whose backend_options feed the fingerprints")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output on stdout")
@click.option("--device-check", is_flag=True,
              help="on the device: prebuild a tiny entry, hydrate it, serve it fresh; fail if the server compiles")
@click.option("--mode", default="full", show_default=True, help="compile mode of the --device-check entry")
@click.option("--model", "model_dir", type=click.Path(file_okay=False, exists=True),
              help="--device-check: a diffusers FLUX transformer dir to use instead of the built-in tiny one")
@click.option("--serve-env", multiple=True, metavar="VAR=VALUE",
              help="--device-check: env the serving process adds, as your server has it (repeatable)")
def doctor(backends: tuple[str, ...], config_path: str | None, as_json: bool, device_check: bool, mode: str,
           model_dir: str | None, serve_env: tuple[str, ...]) -> None:
    """Which backends this host can use, their toolchain fingerprints, cache dirs and env warnings."""
    from ..backends.host import backend_options
    from ..hydration.request import load_config

    names = list(backends) or _backend_names()
    config = load_config(config_path)   # once, not once per backend
    if not device_check and (model_dir or serve_env):
        raise UsageError("--model and --serve-env belong to --device-check")
    if device_check:
        _device_check(names if backends else [], backend_options, config, mode, model_dir, serve_env, as_json)
        return
    rows = [check_backend(n, backend_options(config, n)) for n in names]
    if as_json:
        click.echo(json.dumps({"backends": rows}, indent=1, sort_keys=True))
    else:
        _echo_text(rows)
    # Asked about a backend by name and it cannot be used: that is the answer, as an exit status.
    unusable = [r for r in rows if backends and not r["usable"]]
    if unusable:
        raise click.exceptions.Exit(BackendUnavailable.exit_code)
