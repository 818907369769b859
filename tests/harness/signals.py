"""Ctrl-C reaches the suite as it reaches a terminal, however the suite was started.

A shell without job control (a script's `cmd &`, `nohup`, some CI runners) starts background jobs with
SIGINT ignored, and an ignored signal stays ignored across exec. Python then keeps SIG_IGN instead of
raising KeyboardInterrupt, and `_thread.interrupt_main()` does nothing: the test of a hydrate interrupted
while its store is wedged (tests/hydration/test_budget.py) saw the hydrate run on and fail on the store,
where in the foreground it passes. The suite restores Python's own handler at start, so its workers and
every subprocess they start get the default disposition back."""

from __future__ import annotations

import signal

import pytest


def pytest_configure(config: pytest.Config) -> None:
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
