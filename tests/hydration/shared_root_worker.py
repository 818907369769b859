"""One of several concurrent hydrates that share an extra root (tests/hydration/test_shared_roots.py).

    python -m tests.hydration.shared_root_worker STORE SHARED WORKDIR INDEX ROUNDS NAME

Each round it waits for `WORKDIR/go-<round>`, hydrates a fresh dest of its own plus the shared root
through a slow store (so its temp files live while the others sweep), then writes `done-<round>-<index>`
or `fail-<round>-<index>` holding the error (or the traceback: then the test prints it).
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

from cachekeeper.config.hydrate import HydrateOptions
from cachekeeper.hydration.engine import Target, hydrate
from cachekeeper.hydration.resolve import Pin
from cachekeeper.stores.base import Body
from cachekeeper.stores.file import FileStore
from tests.builders import fingerprint


class SlowStore(FileStore):
    def open_range(self, key: str, start: int, end: int | None, read_timeout: float,
                   connect_timeout: float) -> Body:
        body = super().open_range(key, start, end, read_timeout, connect_timeout)
        chunks = body.chunks

        def slow(size: int) -> Iterator[bytes]:
            for chunk in chunks(32 << 10):
                time.sleep(0.005)
                yield chunk
        body.chunks = slow  # type: ignore[method-assign]
        return body


def main(store: str, shared: str, workdir: str, index: str, rounds: str, name: str) -> None:
    work = Path(workdir)
    for r in range(int(rounds)):
        while not (work / f"go-{r}").exists():
            time.sleep(0.005)
        time.sleep(0.02 * int(index))  # staggered: some sweep while others write
        try:
            hydrate(Target(fingerprint(), work / f"dest-{r}-{index}", [Pin(name)], {"shared": Path(shared)}),
                    HydrateOptions(threads=4), lambda: SlowStore(Path(store)))
            (work / f"done-{r}-{index}").write_text("ok")
        except BaseException as exc:  # reported to the test, which fails with it
            (work / f"fail-{r}-{index}").write_text(f"{exc!r}\n{traceback.format_exc()}")


if __name__ == "__main__":
    main(*sys.argv[1:])
