"""The `cachekeeper` command. Command modules import heavy libraries inside their functions only,
so `cachekeeper hydrate` starts fast and never imports torch, SQLAlchemy or cloud SDKs it does not use."""

from __future__ import annotations

import gc
import signal
import sys
from collections.abc import Sequence
from typing import Any

import click

from .. import settings
from ..errors import CachekeeperError, Interrupted, Terminated
from ..observability import logs
from .hints import hint_for, path_hint


class _Group(click.Group):
    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        """click's own usage errors (an unknown option, a bad value, a missing argument) in the project's
        format: one `error:` line naming the flag or env var, one `hint:` line, exit 2."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "cachekeeper"
            logs.error(usage_message(exc), f"run `{where} --help`", exit_code=2)
            sys.exit(2)
        except click.ClickException as exc:
            logs.error(exc.format_message(), exit_code=exc.exit_code)
            sys.exit(exc.exit_code)
        except click.Abort as exc:
            cause = exc.__cause__ or exc.__context__
            if not isinstance(cause, KeyboardInterrupt):
                logs.error("aborted", exit_code=1)
                sys.exit(1)
            stopped = _interrupted(cause)
            logs.error(stopped.message, hint_for(stopped), exit_code=stopped.exit_code, error=type(stopped).__name__)
            sys.exit(stopped.exit_code)
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except CachekeeperError as exc:
            # The one error handler: the message, the next step from the hint table, the class's exit code.
            hint = path_hint(exc, _paths_given(ctx, exc)) or hint_for(exc)
            logs.error(exc.message, hint or "", exit_code=exc.exit_code, error=type(exc).__name__, **exc.fields)
            ctx.exit(exc.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="cachekeeper")
@click.option("--log-format", type=click.Choice(logs.FORMATS), default="human", show_default=True,
              envvar=settings.LOG_FORMAT.name,
              help="stderr as human lines, or one JSON object per event [env CACHEKEEPER_LOG_FORMAT]")
def cli(log_format: str) -> None:
    """Prebuild, publish and hydrate compiler caches for PyTorch models."""
    logs.configure(log_format)
    from ..bounds import check_environment

    check_environment()   # every env var read outside a flag, at entry: a no-op run checks them too


def _paths_given(ctx: click.Context, exc: BaseException) -> list[tuple[str, str]]:
    """(flag, value) of every string option the failed subcommand was given (command line or env), so an
    exit-9 hint can name the flag whose path failed. The subcommand's context is found on the traceback
    (click pops it before the error reaches the group)."""
    from click.core import ParameterSource

    sub: click.Context | None = None
    tb = exc.__traceback__
    while tb is not None and sub is None:
        sub = next((v for v in tb.tb_frame.f_locals.values()
                    if isinstance(v, click.Context) and v.parent is ctx), None)
        tb = tb.tb_next
    given: list[tuple[str, str]] = []
    for param in sub.command.params if sub is not None else ():
        if not isinstance(param, click.Option) or param.name is None or sub is None:
            continue
        if sub.get_parameter_source(param.name) not in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT):
            continue
        values = sub.params.get(param.name)
        for value in values if isinstance(values, tuple) else (values,):
            if isinstance(value, str) and value:
                given.append(("/".join(param.opts), value))
    return given


class SignalTerm(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt, so the same `finally` blocks run:
    builds killed, claims released, a hydrate's empty claim dropped, temp files removed."""


def _on_sigterm(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)   # a second SIGTERM while unwinding ends the process
    raise SignalTerm()


def _interrupted(cause: KeyboardInterrupt) -> Interrupted:
    if isinstance(cause, SignalTerm):
        return Terminated("terminated (SIGTERM) before the command finished")
    return Interrupted("interrupted (SIGINT, Ctrl-C) before the command finished")


def usage_message(exc: click.UsageError) -> str:
    """`--threads: 0 is too small; ...` or `env CACHEKEEPER_DEADLINE: 'abc' is not a number; ...`."""
    from .options import param_source

    if isinstance(exc, click.BadParameter) and exc.param is not None and exc.ctx is not None:
        return f"{param_source(exc.ctx, exc.param)}: {exc.message}"
    return exc.format_message()


def _register() -> None:
    """Attach every command. Each module imports only click at the top (heavy libraries inside its
    commands), so registering them all costs `cachekeeper hydrate` nothing it would notice."""
    from .boot import env, hydrate, lock
    from .build import keygen, prebuild, validate
    from .canary import canary
    from .capture import capture
    from .compare import diff, explain
    from .db import catalog, db
    from .inspect import coverage, dashboard, ls_, stats
    from .store_admin import gc as store_gc
    from .store_admin import show, verify
    from .traffic import report, suggest

    for command in (prebuild, validate, keygen,          # build side
                    hydrate, lock, env, capture,         # boot side
                    canary,                              # pre-rollout: would the hydrated host compile?
                    report, suggest,                     # traffic: miss reports and what to prebuild
                    ls_, stats, coverage, diff, explain, dashboard,   # inspection
                    show, verify, store_gc,               # the store: read it, check it, collect it
                    db, catalog):                         # catalog upkeep
        cli.add_command(command)
    from .doctor import doctor  # a broken module of our own must fail loudly, not drop its command

    cli.add_command(doctor)


def main() -> None:
    _register()
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        cli.main(prog_name="cachekeeper", standalone_mode=True)
    except KeyboardInterrupt as exc:   # one that lands outside click's own handling (while exiting)
        stopped = _interrupted(exc)
        click.echo(f"error: {stopped.message}", err=True)
        click.echo(f"hint: {hint_for(stopped)}", err=True)
        sys.exit(stopped.exit_code)
    finally:
        # The process ends here: spare the collector's pass over every object at interpreter exit. With
        # SQLAlchemy loaded it costs ~0.2 s of CPU, and 8 prebuild workers ending together on 2 cores took
        # 1.5-2 s to exit (benchmarks/prebuild_scale.py). Files and connections are closed by their own
        # `with` blocks; nothing relies on a cycle being collected at exit.
        gc.freeze()
