"""`cachekeeper canary`: before a rollout, replay each matrix entry's warm-up on the hydrated dir of a fresh
host under strict mode `fail`; exit 15 naming each shape that would compile (admin/canary.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from .. import bounds
from .options import backend_pairs, json_option, number, required_config, say

if TYPE_CHECKING:
    from ..format.spec import Shape


@click.command()
@click.option("--config", "config_path", required=True, type=click.Path(dir_okay=False),
              help="the config the host was hydrated with (its matrix is replayed)")
@click.option("--dest", required=True, type=click.Path(file_okay=False), help="the hydrated dest (as hydrate --dest)")
@click.option("--backend", "backends", multiple=True, help="only this backend's entries (repeatable)")
@click.option("--model", "models", multiple=True, help="only this model's entries (repeatable)")
@click.option("--device", help="device the inference runs on, for the fingerprint (as hydrate)")
@click.option("--option", "pairs", multiple=True, metavar="KEY=VALUE", help="backend option (as hydrate)")
@click.option("--shape", "shapes", multiple=True, metavar="HxWxB",
              help="also replay the matrix at this shape, one the servers will be asked for (repeatable)")
@number("--timeout", bound=bounds.BUILD_TIMEOUT, default=1800.0, show_default=True, metavar="SECONDS",
        help="seconds one replay may take")
@json_option
def canary(config_path: str, dest: str, backends: tuple[str, ...], models: tuple[str, ...], device: str | None,
           pairs: tuple[str, ...], shapes: tuple[str, ...], timeout: float, as_json: bool) -> None:
    """Replay each matrix entry's warm-up, as the build ran it, against the hydrated dir under strict mode
    fail: exit 0 when none compiles, 14 naming each shape that would."""
    from ..admin.canary import failure, run_canary

    config = required_config(config_path)
    results = run_canary(config, Path(dest), backends=list(backends) or None, models=list(models) or None,
                         options=backend_pairs(pairs), device=device, shapes=[parse_shape(s) for s in shapes],
                         timeout=timeout)
    if as_json:
        click.echo(json.dumps({"ok": all(r.ok for r in results), "toolchains": [r.to_json() for r in results]}))
    for result in results:
        for line in result.lines():
            say(line)
    refused = failure(results)
    if refused is not None:
        raise refused
    total = sum(len(r.replays) for r in results)
    say(f"canary: {total} {'entry' if total == 1 else 'entries'} replayed, none would compile")


def parse_shape(text: str) -> Shape:
    """`--shape 96x64x1` (or 96x64): a shape the config would accept, else one usage error."""
    from ..config.schema import shape_problem
    from ..errors import UsageError
    from ..format.spec import Shape

    parts = text.strip().lower().split("x")
    if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts):
        raise UsageError(f"--shape must be HxW or HxWxB (e.g. 96x64x1), got {text!r}")
    height, width, batch = (int(parts[0]), int(parts[1]), int(parts[2]) if len(parts) == 3 else 1)
    shape = Shape(height, width, batch)
    if problem := shape_problem(shape):
        raise UsageError(f"--shape {text}: {problem}")
    return shape
