"""The dashboard's routes: `/` (toolchains, coverage matrix, build queue, recent publishes),
`/diff` (two toolchains side by side) and `/metrics` (the same figures for Prometheus,
docs/observability.md). GET only; each request is one short read transaction."""

from __future__ import annotations

import contextlib
import errno
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from ..catalog import views
from ..errors import AddressUnavailable, CatalogError, UsageError
from ..inspection.diff import plan_diff, resolve_prefix
from .params import BadQuery, MatrixParams, parse_diff, parse_matrix

if TYPE_CHECKING:
    from ..catalog import Catalog

TEMPLATES = Path(__file__).parent / "templates"
DIFF_LIST_LIMIT = 200


def _mb(size: int | float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{int(size)} B"


def _secs(s: float | None) -> str:
    return "—" if s is None else (f"{s:.0f}s" if s < 600 else f"{s / 60:.0f}m")


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to `host`:`port` (0: any free port), before anything says the dashboard is serving:
    a port in use is one AddressUnavailable, never a URL printed first and the server's own error after."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise AddressUnavailable(f"dashboard: cannot bind {host}:{port}: {exc.strerror}",
                                 "bind an address of this host (127.0.0.1, or 0.0.0.0 behind a proxy)") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as uvicorn does: not past a live listener
    try:
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise AddressUnavailable(f"dashboard: port {port} on {host} is in use by another process") from None
        raise AddressUnavailable(f"dashboard: cannot bind {host}:{port}: {exc.strerror or exc}",
                                 "bind an address of this host (127.0.0.1, or 0.0.0.0 behind a proxy), on a port "
                                 "this user may open (1024 and above)") from None
    return sock


def url_of(sock: socket.socket, root_path: str) -> str:
    """The dashboard's URL on the socket it listens on (the port it got when asked for any)."""
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}{root_path}/"


def serve(app: Starlette, sock: socket.socket, root_path: str) -> None:
    """Serve `app` on the bound `sock` until stopped: Ctrl-C or SIGTERM (a unit stopping) ends it normally,
    exit 0, as `uvicorn.run` does."""
    import uvicorn

    config = uvicorn.Config(app, root_path=root_path, log_level="warning", proxy_headers=True)
    with contextlib.suppress(KeyboardInterrupt):   # the CLI's SIGTERM arrives as one too (cli/__init__.py)
        uvicorn.Server(config).run(sockets=[sock])


def create_app(catalog: Catalog, traffic: Callable[[], dict[str, Any]] | None = None,
               coverage: Callable[[], list[dict[str, Any]]] | None = None) -> Starlette:
    """`traffic`: the "served but not prebuilt" table (inspection/traffic.py), read per request; None hides it.
    `coverage`: the `--config` matrix's built / missing counts per toolchain, for /metrics; None omits them."""
    templates = Jinja2Templates(directory=str(TEMPLATES))
    templates.env.filters["mb"] = _mb
    templates.env.filters["secs"] = _secs
    for name in ("index.html", "diff.html"):
        templates.get_template(name)     # compile at start-up, not on the first visitor's request

    def page(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
        return templates.TemplateResponse(request, name, {"catalog_url": catalog.url, **context},
                                          status_code=status)

    def index(request: Request) -> Response:
        q = parse_matrix(request.url.query)
        with views.reading(catalog) as conn:
            fps = views.fingerprint_summaries(conn)
            chosen = _choose(q, fps)
            matrix = choices = detail = None
            if chosen is not None:
                f = views.MatrixFilter(chosen["id"], chosen["backend"], q.model, q.mode, q.dtype, q.status,
                                       q.page, q.per)
                # Captured sets have no shape: they are the matrix's last row, not cells.
                matrix = views.Matrix((), (), False) if q.status == "captured" else views.matrix(conn, f)
                detail = views.fingerprint_detail(conn, chosen["id"])
                choices = views.filter_choices(conn, chosen["backend"], detail)
            queue = views.queue_view(conn)
            publishes = views.recent_publishes(conn, chosen["id"] if chosen else None)
        return page(request, "index.html", {
            "traffic": traffic() if traffic is not None else None,
            "q": q, "fps": fps, "chosen": chosen, "matrix": matrix, "choices": choices, "detail": detail,
            "queue": queue,
            "publishes": publishes, "statuses": views.STATUSES,
            "prev_url": _page_url(q, chosen, q.page - 1) if q.page > 1 else None,
            "next_url": _page_url(q, chosen, q.page + 1) if matrix is not None and matrix.has_next else None})

    def diff(request: Request) -> Response:
        q = parse_diff(request.url.query)
        with views.reading(catalog) as conn:
            ids = [resolve_prefix(p, views.fingerprint_ids(conn, p)) for p in (q.a, q.b)]
            fa, fb = (views.fingerprint(conn, i) for i in ids)
            assert fa is not None and fb is not None   # the ids came from the fingerprints table
            report = plan_diff(fa, fb, views.entries_only_in(conn, fa.id, fb.id),
                               views.entries_only_in(conn, fb.id, fa.id), workers=q.workers)
        return page(request, "diff.html", {"d": report, "q": q, "limit": DIFF_LIST_LIMIT})

    def figures() -> Any:
        from ..observability.metrics import CatalogFigures

        with views.reading(catalog) as conn:
            toolchains, queue, expired = views.metric_counts(conn)
        served = None
        if traffic is not None:
            table = traffic()
            served = {fp: len(rows) for fp, rows in table.get("toolchains", {}).items()}
        return CatalogFigures(toolchains, queue, expired, served, coverage() if coverage is not None else None)

    def metrics(request: Request) -> Response:
        try:
            from ..observability.metrics import catalog_registry, exposition
        except ImportError:
            return PlainTextResponse("501 /metrics needs prometheus_client: install cachekeeper[metrics]\n",
                                     status_code=501)
        body, content_type = exposition(catalog_registry(figures))
        return Response(body, media_type=content_type)

    def bad_query(request: Request, exc: Exception) -> Response:
        return PlainTextResponse(f"400 bad request: {exc}\n", status_code=400)

    def not_found(request: Request, exc: Exception) -> Response:
        message = exc.message if isinstance(exc, UsageError) else str(exc)
        return PlainTextResponse(f"404 not found: {message}\n", status_code=404)

    def catalog_down(request: Request, exc: Exception) -> Response:
        message = exc.message if isinstance(exc, CatalogError) else str(exc)
        return PlainTextResponse(f"503 catalog unavailable: {message}\n", status_code=503)

    return Starlette(
        routes=[Route("/", index), Route("/diff", diff), Route("/metrics", metrics)],
        exception_handlers={BadQuery: bad_query, UsageError: not_found, CatalogError: catalog_down})


def _choose(q: MatrixParams, fps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The toolchain the matrix shows: the one asked for (an unknown id is a 404), else the fullest."""
    if q.fp is not None:
        chosen_id = resolve_prefix(q.fp, [f["id"] for f in fps])
        return next(f for f in fps if f["id"] == chosen_id)
    return max(fps, key=lambda f: (f["manifests"], f["id"]), default=None)


def _page_url(q: MatrixParams, chosen: dict[str, Any] | None, page: int) -> str:
    params = {"fp": chosen["id"] if chosen else None, "model": q.model, "mode": q.mode, "dtype": q.dtype,
              "status": q.status, "per": q.per if q.per != MatrixParams.per else None, "page": page}
    return "?" + urlencode({k: v for k, v in params.items() if v is not None})
