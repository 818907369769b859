"""`cachekeeper env`: the variables that point a runtime at a hydrated dir, for boot integrations.

`hydrate --print-env` prints them for `eval`; this writes them as a file another process reads: a systemd
`EnvironmentFile=` (`--format systemd`) or a file a container's shell sources (`--format shell`).
"""

from __future__ import annotations

import shlex
from pathlib import Path

import click

FORMATS = ("shell", "systemd")


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
    """Print (or write) the variables that make this host's runtime read the hydrated DEST."""
    from ..api import env as exports_for
    from ..errors import UsageError
    from ..fsutil import atomic_write_bytes

    options = {}
    for pair in pairs:
        k, sep, v = pair.partition("=")
        if not sep or not k:
            raise UsageError(f"--option expects KEY=VALUE, got {pair!r}")
        options[k] = v
    text = render(exports_for(config=config_path, backend=backend, dest=dest, device=device, options=options), fmt)
    if output is None:
        click.echo(text, nl=False)
    else:
        atomic_write_bytes(Path(output), text.encode())
