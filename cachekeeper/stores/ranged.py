"""One ranged GET per attempt, for every HTTP store: the boot path's reads.

A store prepares the request (`S3Store.prepared_get`: a presigned URL over a shared urllib3 pool;
`GCSStore.prepared_get`: the JSON API's media URL through the store's own authorized session) and this
module sends it with the timeouts the deadline leaves, classifies the answer and streams the body.
`stores/reader.py` retries and resumes around it. Why not the SDKs' own downloads: their read timeouts
are fixed per client (a deadline needs one per request), their retries restart an object from byte 0 and
run on their own clock, and their response handling costs CPU we would rather spend hashing.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import ClassVar, Literal, NoReturn, Protocol

import urllib3.exceptions

from ..errors import StoreAuthError, StoreError, StoreRetryable, StoreUnreachable
from ._util import BucketPlumbing
from .base import Body, BytesBody
from .reader import parse_content_range


class Response(Protocol):
    """What both stores' HTTP stacks return with a streamed body: a urllib3 response (requests' `.raw`)."""

    @property
    def status(self) -> int: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def length_remaining(self) -> int | None: ...

    def read1(self, amt: int) -> bytes: ...
    def release_conn(self) -> None: ...
    def drain_conn(self) -> None: ...
    def close(self) -> None: ...


# (url, headers, connect timeout, read timeout) -> a response whose body is not read yet
Send = Callable[[str, dict[str, str], float, float], Response]


@dataclass(frozen=True)
class PreparedGet:
    """One object's GET as its store prepared it (URL signed or session authorized)."""

    url: str
    send: Send
    where: str                                   # the object's URL in messages: s3://bucket/prefix/key
    service: str                                 # "S3", "GCS": who answered, in messages
    missing: Callable[[], NoReturn]              # a 404: the store tells a missing key from a missing bucket
    headers: Mapping[str, str] = field(default_factory=dict)
    # the store's own error translation around sending (GCS refreshes credentials then)
    errors: Callable[[], AbstractContextManager[object]] = nullcontext


Verdict = Literal["body", "past_end", "missing", "denied", "retry", "error"]


def classify(status: int) -> Verdict:
    """What an HTTP status means for one ranged read."""
    if status in (200, 206):
        return "body"
    if status == 416:   # starts at or past the end: an empty read
        return "past_end"
    if status == 404:
        return "missing"
    if status in (401, 403):
        return "denied"
    if status == 429 or status >= 500:
        return "retry"
    return "error"


def causes(exc: BaseException) -> Iterator[BaseException]:
    """The exception and what it wraps (requests -> urllib3 -> socket), a bounded walk."""
    seen: list[BaseException] = []
    todo: list[BaseException] = [exc]
    while todo and len(seen) < 16:
        e = todo.pop()
        if any(e is s for s in seen):
            continue
        seen.append(e)
        yield e
        for nxt in (e.__cause__, e.__context__, getattr(e, "reason", None), *e.args):
            if isinstance(nxt, BaseException):
                todo.append(nxt)


def nothing_listens(exc: BaseException) -> bool:
    """Refused connections and unknown hosts will not heal within a retry budget: fail at once."""
    return any(isinstance(e, ConnectionRefusedError | socket.gaierror | urllib3.exceptions.NameResolutionError)
               for e in causes(exc))


def range_header(start: int, end: int | None) -> dict[str, str]:
    """Bytes [start, end) (to the object's end when `end` is None); none for a whole object."""
    if start <= 0 and end is None:
        return {}
    return {"Range": f"bytes={start}-{'' if end is None else end - 1}"}


class RangeBody(Body):
    def __init__(self, resp: Response, where: str, skip: int) -> None:
        self.resp = resp
        self.where = where
        self.skip = skip          # a server that ignored our Range header sends the object from byte 0
        self.done = False
        if resp.status == 206:
            self.total = parse_content_range(resp.headers.get("Content-Range"))
        else:
            length = resp.headers.get("Content-Length") or ""
            self.total = int(length) if length.isdigit() else None

    def chunks(self, size: int) -> Iterator[bytes]:
        try:
            # read1: what has arrived, so a reset loses no received byte (the stores ask for identity encoding)
            while chunk := self.resp.read1(size):
                if self.skip:
                    cut = min(self.skip, len(chunk))
                    self.skip -= cut
                    chunk = chunk[cut:]
                if chunk:
                    yield chunk
            self.done = True
        except (urllib3.exceptions.HTTPError, OSError) as exc:  # requests' errors are OSErrors too
            raise StoreRetryable(f"{self.where}: transfer broke mid-body ({type(exc).__name__})") from None

    def close(self) -> None:
        if not (self.done or self.resp.length_remaining == 0):  # half-read: this connection cannot serve again
            self.resp.close()
        self.resp.release_conn()


def open_ranged(get: PreparedGet, start: int, end: int | None, read_timeout: float,
                connect_timeout: float) -> Body:
    """One attempt at bytes [start, end) of the prepared object; `StoreRetryable` when another may work."""
    headers = {**get.headers, **range_header(start, end)}
    with get.errors():
        try:
            resp = get.send(get.url, headers, connect_timeout, read_timeout)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            if nothing_listens(exc):
                raise StoreUnreachable(f"{get.where}: cannot reach the {get.service} endpoint "
                                       "(connection refused)") from None
            raise StoreRetryable(f"{get.where}: request failed ({type(exc).__name__})") from None
    status = int(resp.status)
    verdict = classify(status)
    if verdict == "body":
        return RangeBody(resp, get.where, start if status == 200 else 0)
    resp.drain_conn()
    resp.release_conn()
    if verdict == "past_end":
        return BytesBody(b"", parse_content_range(resp.headers.get("Content-Range")))
    if verdict == "missing":
        get.missing()
    if verdict == "denied":
        raise StoreAuthError(f"{get.where}: access denied ({status})")
    if verdict == "retry":
        raise StoreRetryable(f"{get.where}: {get.service} answered {status}")
    raise StoreError(f"{get.where}: {get.service} answered {status}")


class RangedReads(BucketPlumbing):
    """`open_range` for a bucket store: one ranged GET that the store signs or authorizes (`_sign`), sent
    and classified here. S3Store and GCSStore put it before `Store`."""

    service: ClassVar[str]
    get_headers: ClassVar[Mapping[str, str]] = {}

    def _sign(self, key: str) -> tuple[str, Send]:
        """The URL of `key` and who sends a GET to it."""
        raise NotImplementedError

    def prepared_get(self, key: str) -> PreparedGet:
        """The boot path's GET of `key`, ready to send."""
        with self._errors(key):  # credential problems surface while signing
            url, send = self._sign(key)
        return PreparedGet(url=url, send=send, where=f"{self.url}/{key}", service=self.service,
                           missing=lambda: self._missing(key), headers=self.get_headers,
                           errors=lambda: self._errors(key))  # GCS refreshes credentials while sending

    def open_range(self, key: str, start: int, end: int | None, read_timeout: float,
                   connect_timeout: float) -> Body:
        return open_ranged(self.prepared_get(key), start, end, read_timeout, connect_timeout)
