"""Every `cachekeeper ...` line in deploy/boot parses with the real CLI: a renamed command or option fails
here, not on a booting fleet."""

from __future__ import annotations

import click
import pytest

from cachekeeper.cli import _register, cli

from .conftest import invocations


def test_the_boot_files_call_hydrate_env_and_report_never_capture_publish() -> None:
    """`capture --publish` refuses unless the config opts in (docs/security.md): the boot files only mention
    it in comments, so a copied file works with the default `capture: report`."""
    used = {argv[0] for _, argv in invocations()}
    assert used == {"hydrate", "env", "report", "canary"}
    assert len(invocations()) >= 8


@pytest.mark.parametrize(("where", "argv"), invocations(), ids=lambda v: v if isinstance(v, str) else None)
def test_each_invocation_parses(where: str, argv: list[str]) -> None:
    _register()
    command = cli.commands[argv[0]]
    try:
        command.make_context(argv[0], argv[1:])
    except click.ClickException as exc:
        pytest.fail(f"{where}: `cachekeeper {' '.join(argv)}`: {exc.format_message()}")
