"""A fault-injecting HTTP proxy on loopback, in front of the real SeaweedFS or fake-gcs-server.

It forwards each request byte for byte (Host untouched, so SigV4 signatures still verify), one request
per connection (it asks the upstream for `Connection: close`), and on a chosen share of requests
injects a fault instead:

    "500"      answer 500 Internal Server Error
    "503"      answer 503 Service Unavailable (S3's "slow down")
    "reset"    reset the connection before any response
    "reset_mid" forward, relay the headers and half the body, then reset
    "stall"    accept the request and never answer (until the proxy stops)

Every fault it injects is counted, and every request's Range header is recorded, so tests can prove the
faults happened and that a retry resumed where the body broke off. Use as a context manager.
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

KINDS = ("500", "503", "reset", "reset_mid", "stall")


@dataclass
class Seen:
    method: str
    path: str
    range: str | None
    fault: str


@dataclass
class FaultProxy:
    upstream: tuple[str, int]
    rate: float = 0.0                       # share of matching requests that get a fault
    kinds: tuple[str, ...] = KINDS
    match: str = ""                         # only requests whose path contains this get faults
    first: int | None = None                # instead of `rate`: fault exactly the first N matching requests
    seed: int = 8
    injected: Counter[str] = field(default_factory=Counter)
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self._matched = 0
        self._turn = 0
        self._conns: list[socket.socket] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def __enter__(self) -> FaultProxy:
        threading.Thread(target=self._accept, name="faultproxy", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._sock.close()
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            with contextlib.suppress(OSError):
                c.close()

    # --- plumbing ------------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _decide(self, path: str) -> str:
        with self._lock:
            if self.match not in path:
                return "pass"
            self._matched += 1
            hit = self._matched <= self.first if self.first is not None else self._rng.random() < self.rate
            if not hit:
                return "pass"
            self._turn += 1  # kinds in rotation: a handful of faults already covers every kind
            return self.kinds[(self._turn - 1) % len(self.kinds)]

    def _serve(self, client: socket.socket) -> None:
        try:
            head, body = _read_request(client)
            if head is None:
                return
            lines = head.split(b"\r\n")
            method, path = ([*lines[0].split(b" "), b"", b""])[:2]
            headers = [ln for ln in lines[1:] if ln and not ln.lower().startswith(b"connection:")]
            rng = next((ln.split(b":", 1)[1].strip().decode() for ln in headers if ln.lower().startswith(b"range:")),
                       None)
            fault = self._decide(path.decode(errors="replace"))
            with self._lock:
                self.seen.append(Seen(method.decode(), path.decode(errors="replace"), rng, fault))
                if fault != "pass":
                    self.injected[fault] += 1
            if fault in ("500", "503"):
                reason = b"Internal Server Error" if fault == "500" else b"Service Unavailable"
                client.sendall(b"HTTP/1.1 " + fault.encode() + b" " + reason +
                               b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            if fault == "reset":
                _reset(client)
                return
            if fault == "stall":
                self._stop.wait()
                return
            request = b"\r\n".join([lines[0], *headers, b"Connection: close", b"", b""]) + body
            response = _forward(self.upstream, request)
            if fault == "reset_mid":
                end = response.find(b"\r\n\r\n") + 4
                cut = end + max(1, (len(response) - end) // 2)
                client.sendall(response[:cut])
                time.sleep(0.2)  # let the client read what came (a reset discards unread bytes) ...
                _reset(client)   # ... then break the body off
                return
            client.sendall(response)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                client.close()


def _read_request(sock: socket.socket) -> tuple[bytes | None, bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None, b""
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    length = 0
    for ln in head.split(b"\r\n")[1:]:
        if ln.lower().startswith(b"content-length:"):
            length = int(ln.split(b":", 1)[1])
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return head, rest


def _forward(upstream: tuple[str, int], request: bytes) -> bytes:
    with socket.create_connection(upstream, timeout=30) as up:
        up.sendall(request)
        parts = []
        while chunk := up.recv(1 << 20):
            parts.append(chunk)
    return b"".join(parts)


def _reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), as a dropped connection or a crashing middlebox does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def upstream_of(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("http://").rstrip("/").partition(":")
    return host, int(port)


@contextlib.contextmanager
def fault_proxy(url: str, **kw: object) -> Iterator[FaultProxy]:
    with FaultProxy(upstream_of(url), **kw) as proxy:  # type: ignore[arg-type]
        yield proxy
