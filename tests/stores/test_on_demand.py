"""`OnDemand`: one store for a block of work, opened at the first use (or never), shared by every step,
closed once when the block ends; a late open never holds the block's end and is never kept after it."""

from __future__ import annotations

import threading
from pathlib import Path

from cachekeeper.stores.base import OnDemand
from cachekeeper.stores.file import FileStore


class Counted(FileStore):
    opened = 0
    closed = 0

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        Counted.opened += 1

    def close(self) -> None:
        Counted.closed += 1
        super().close()


def _reset() -> None:
    Counted.opened = Counted.closed = 0


def test_every_step_gets_the_one_store_and_the_block_closes_it_once(tmp_path: Path) -> None:
    _reset()
    with OnDemand(lambda: Counted(tmp_path)) as get:
        assert get() is get() is get()
        assert Counted.closed == 0
    assert (Counted.opened, Counted.closed) == (1, 1)


def test_a_block_that_needs_no_store_opens_none(tmp_path: Path) -> None:
    _reset()
    with OnDemand(lambda: Counted(tmp_path)):
        pass
    assert (Counted.opened, Counted.closed) == (0, 0)


def test_an_open_that_ends_after_the_block_is_closed_and_the_end_never_waits_for_it(tmp_path: Path) -> None:
    """A deadline gave up on the step that opened it: the block ended meanwhile, without waiting."""
    _reset()
    release = threading.Event()

    def slow() -> Counted:
        release.wait(10)
        return Counted(tmp_path)

    block = OnDemand(slow)
    with block as get:
        late = threading.Thread(target=get)
        late.start()
    assert Counted.opened == 0   # the block ended with the open still under way
    release.set()
    late.join(10)
    assert (Counted.opened, Counted.closed) == (1, 1)


def test_two_steps_opening_at_once_keep_one_store(tmp_path: Path) -> None:
    _reset()
    start = threading.Barrier(2)
    got: list[FileStore] = []

    def opener() -> Counted:
        start.wait(10)
        return Counted(tmp_path)

    with OnDemand(opener) as get:
        threads = [threading.Thread(target=lambda: got.append(get())) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert got[0] is got[1]
    assert (Counted.opened, Counted.closed) == (2, 2)   # the loser's open closed at once, the winner's at the end
