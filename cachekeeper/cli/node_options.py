"""The node-scale options of `hydrate` and `gc` (node cache, byte budgets, durability, hot first), checked
where they enter: a value from a flag or an environment variable that is 0 where meaningless, negative,
not a number, or absurdly large is one `error:` line naming its source (exit 2), before any work.

Values arrive as strings (click does not parse them) so that the message can name the flag or the
variable the bad value came from.
"""

from __future__ import annotations

import click

from ..bounds import BYTE_BUDGET, COUNT, checked_bytes
from ..errors import UsageError

MAX_BYTES = int(BYTE_BUDGET.high)
MAX_COUNT = int(COUNT.high)


def source_of(param: str, flag: str, env: str | None) -> str:
    """`--flag` or `env VAR`: where the value of click parameter `param` came from."""
    ctx = click.get_current_context(silent=True)
    if env and ctx is not None and ctx.get_parameter_source(param) == click.core.ParameterSource.ENVIRONMENT:
        return f"env {env}"   # as settings.py and every other entry name a variable
    return flag


def parse_bytes(text: str, source: str) -> int:
    """`20000000000`, `20G`, `512MiB`: bounds.parse_bytes, the one parser flags, env and config share."""
    return checked_bytes(text, source)


def parse_count(text: str, source: str) -> int:
    if not text.strip().isdigit() or not 1 <= int(text) <= MAX_COUNT:
        raise UsageError(f"{source} must be a whole number from 1 to {MAX_COUNT}, got {text!r}")
    return int(text)


def bytes_option(param: str, flag: str, env: str | None, text: str | None) -> int | None:
    return None if text is None else parse_bytes(text, source_of(param, flag, env))


def count_option(param: str, flag: str, env: str | None, text: str | None) -> int | None:
    return None if text is None else parse_count(text, source_of(param, flag, env))
