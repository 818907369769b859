"""Every Prometheus metric cachekeeper exposes, defined once (`METRICS`), and the four ways they leave
the process: hydrate's node_exporter textfile, `report --watch`'s /metrics, the dashboard's /metrics and
prebuild's Pushgateway push (or textfile). docs/observability.md is this table in prose; the tests check
the doc, the alert rules and the Grafana dashboard against `METRICS`.

Imported only when metrics are asked for (`--metrics-file`, `--metrics-port`, `--metrics-push`, the
dashboard): `prometheus_client` is the `metrics` extra, and a plain hydrate never loads it.

Label cardinality is bounded: toolchain ids and backends are few by construction; model and shape values
come from configs and serving traffic, so each metric source passes them through one `LabelCap`, which
keeps the first `CAP` distinct values per label and maps the rest to "other" with one warning line.
A metrics problem (an unwritable file, a port in use, an unreachable Pushgateway) is one warning line and
never fails the command it observes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    disable_created_metrics,
    push_to_gateway,
    start_http_server,
    write_to_textfile,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from . import logs

CAP = 50            # distinct values kept per model / shape label; the rest become OTHER
OTHER = "other"
HYDRATE_OUTCOMES = ("done", "noop", "incomplete", "fell_back", "failed")
PREBUILD_OUTCOMES = ("built", "present", "failed", "held", "refused")


@dataclass(frozen=True)
class Metric:
    name: str
    kind: str                 # gauge | counter (a counter's exposed name ends in _total)
    labels: tuple[str, ...]
    help: str
    source: str               # hydrate | report | dashboard | prebuild


_H = ("backend", "fingerprint", "model")
_R = ("backend", "fingerprint", "model", "shape")
# The compile ledger's reasons (reports/compiles.py LABELS): a fixed set of 7, so the label needs no cap.
_RC = (*_R, "reason")
_P = ("backend", "fingerprint", "model", "shape")

METRICS: dict[str, Metric] = {m.name: m for m in (
    # hydrate: node_exporter textfile, rewritten atomically by every run
    Metric("cachekeeper_hydrate_outcome", "gauge", (*_H, "outcome"),
           "1 for the last hydrate's outcome (done, noop, incomplete, fell_back, failed), 0 for the others",
           "hydrate"),
    Metric("cachekeeper_hydrate_duration_seconds", "gauge", _H, "wall time of the last hydrate", "hydrate"),
    Metric("cachekeeper_hydrate_ready_seconds", "gauge", _H,
           "time until the hot entries were in place (--ready-after); absent without it", "hydrate"),
    Metric("cachekeeper_hydrate_fetched_bytes", "gauge", _H, "bytes the last hydrate fetched from the store",
           "hydrate"),
    Metric("cachekeeper_hydrate_fetched_files", "gauge", _H, "files the last hydrate fetched", "hydrate"),
    Metric("cachekeeper_hydrate_files_in_place", "gauge", _H, "files in place after the last hydrate", "hydrate"),
    Metric("cachekeeper_hydrate_entries", "gauge", (*_H, "state"),
           "wanted entries by state: hit (prebuilt, in place), missed (not built), captured (captured sets applied)",
           "hydrate"),
    Metric("cachekeeper_hydrate_retries", "gauge", _H, "store reads the last hydrate retried", "hydrate"),
    Metric("cachekeeper_hydrate_node_cache_reused_files", "gauge", _H,
           "files placed from the node cache's copy (linked or copied)", "hydrate"),
    Metric("cachekeeper_hydrate_node_cache_fetched_bytes", "gauge", _H,
           "bytes fetched from the store into the node cache", "hydrate"),
    Metric("cachekeeper_hydrate_last_run_timestamp_seconds", "gauge", _H, "when the last hydrate ended (unix)",
           "hydrate"),
    # report --watch: the serving host's runtime misses
    Metric("cachekeeper_runtime_calls_total", "counter", _R, "serving calls reported", "report"),
    Metric("cachekeeper_runtime_compiled_calls_total", "counter", _RC,
           "serving calls that compiled something, by the compile ledger's reason", "report"),
    Metric("cachekeeper_runtime_compile_seconds_total", "counter", _RC,
           "seconds serving calls spent compiling, by the compile ledger's reason", "report"),
    Metric("cachekeeper_report_last_round_timestamp_seconds", "gauge", ("backend", "fingerprint"),
           "when the sidecar last finished a round (stored a report, or had nothing to report)", "report"),
    Metric("cachekeeper_report_interval_seconds", "gauge", ("backend", "fingerprint"),
           "the sidecar's --watch interval", "report"),
    # dashboard: the catalog
    Metric("cachekeeper_catalog_entries_built", "gauge", ("backend", "fingerprint"),
           "prebuilt entries (manifests) the catalog lists per toolchain", "dashboard"),
    Metric("cachekeeper_catalog_captured_sets", "gauge", ("backend", "fingerprint"),
           "captured sets of runtime compiles per toolchain", "dashboard"),
    Metric("cachekeeper_queue_jobs", "gauge", ("status",), "build queue jobs by status (pending, running, ...)",
           "dashboard"),
    Metric("cachekeeper_queue_expired_leases", "gauge", (),
           "running jobs whose lease expired (their worker stopped renewing)", "dashboard"),
    Metric("cachekeeper_served_not_prebuilt_shapes", "gauge", ("fingerprint",),
           "shapes serving hosts met that no prebuild covers (dashboard --traffic)", "dashboard"),
    Metric("cachekeeper_coverage_entries", "gauge", ("backend", "fingerprint", "state"),
           "entries of the dashboard's --config by state (built, missing) per toolchain", "dashboard"),
    Metric("cachekeeper_coverage_ratio", "gauge", ("backend", "fingerprint"),
           "built / wanted entries of the dashboard's --config per toolchain (1 = fully built)", "dashboard"),
    # prebuild: a batch job's push (or textfile)
    Metric("cachekeeper_prebuild_entry_duration_seconds", "gauge", (*_P, "outcome"),
           "build seconds of each entry this run handled, by outcome", "prebuild"),
    Metric("cachekeeper_prebuild_entries", "gauge", ("outcome",), "entries this run handled by outcome", "prebuild"),
    Metric("cachekeeper_prebuild_last_run_timestamp_seconds", "gauge", (), "when the prebuild run ended (unix)",
           "prebuild"),
)}


def exposed_names() -> set[str]:
    """Every series name a scrape can show (counters add `_total` in the text format; `_created` is off)."""
    return set(METRICS)


def _family(name: str) -> str:
    return name[:-len("_total")] if METRICS[name].kind == "counter" else name


def _make(name: str, registry: CollectorRegistry) -> Any:
    m = METRICS[name]
    kind = Counter if m.kind == "counter" else Gauge
    return kind(_family(name), m.help, m.labels, registry=registry)


def registry() -> CollectorRegistry:
    disable_created_metrics()  # type: ignore[no-untyped-call]  # no `_created` twin of each counter: half the series, no use here
    return CollectorRegistry(auto_describe=True)


class LabelCap:
    """Bounds the distinct values of each free-text label (model, shape): the first `cap` are kept, the
    rest are reported as OTHER, with one warning line per label for the life of the process."""

    def __init__(self, cap: int = CAP, warn: Callable[[str], None] = logs.warning) -> None:
        self.cap = cap
        self.warn = warn
        self.seen: dict[str, set[str]] = {}
        self.warned: set[str] = set()

    def __call__(self, label: str, value: str) -> str:
        seen = self.seen.setdefault(label, set())
        if value in seen:
            return value
        if len(seen) < self.cap:
            seen.add(value)
            return value
        if label not in self.warned:
            self.warned.add(label)
            self.warn(f"metrics: more than {self.cap} distinct {label} values; the rest are counted as "
                      f"{label}={OTHER!r} (label cardinality is capped)")
        return OTHER


# --- writing ---------------------------------------------------------------------------------------


def write_textfile(path: str, reg: CollectorRegistry, what: str) -> bool:
    """node_exporter's textfile format, atomically (a temp file in the same dir, then a rename). A failure
    is one warning naming `what` (the flag) and never an error."""
    try:
        write_to_textfile(path, reg)
    except OSError as exc:
        logs.warning(f"{what} {path}: cannot write the metrics ({exc.strerror or exc}); the run itself is "
                     "unaffected")
        return False
    return True


def push(url: str, reg: CollectorRegistry, job: str, grouping: Mapping[str, str], timeout: float = 10.0) -> bool:
    """Push to a Pushgateway (the convention for batch jobs); unreachable is one warning line."""
    try:
        push_to_gateway(url, job=job, registry=reg, grouping_key=dict(grouping), timeout=timeout)
    except Exception as exc:   # URLError, HTTPError, socket errors, a bad URL: all one warning
        reason = getattr(exc, "reason", None) or exc
        logs.warning(f"--metrics-push {url}: could not push the metrics ({reason}); the run itself is unaffected")
        return False
    return True


# --- hydrate ---------------------------------------------------------------------------------------


def hydrate_outcome(report: Any | None, failed: bool) -> str:
    """failed: the hydrate exited non-zero. With --best-effort (exit 0 anyway): fell_back when nothing is in
    place (nothing built, the store down), incomplete when some of it is; else done or noop."""
    if failed or report is None:
        return "failed"
    if report.nothing_built or (report.incomplete and not report.files_total):
        return "fell_back"
    if report.incomplete:
        return "incomplete"
    return "noop" if report.noop else "done"


def hydrate_registry(report: Any | None, *, backend: str, fingerprint: str, model: str,
                     counts: Mapping[str, int] | None = None, failed: bool = False,
                     cap: LabelCap | None = None) -> CollectorRegistry:
    """The last hydrate's figures; `report` None (a hydrate that raised) writes the outcome alone."""
    reg = registry()
    base = {"backend": backend, "fingerprint": fingerprint, "model": (cap or LabelCap())("model", model)}
    outcome = hydrate_outcome(report, failed)
    g = _make("cachekeeper_hydrate_outcome", reg)
    for o in HYDRATE_OUTCOMES:
        g.labels(**base, outcome=o).set(1 if o == outcome else 0)
    _make("cachekeeper_hydrate_last_run_timestamp_seconds", reg).labels(**base).set(time.time())
    if report is None:
        return reg
    figures = {
        "cachekeeper_hydrate_duration_seconds": report.seconds,
        "cachekeeper_hydrate_fetched_bytes": report.bytes_fetched,
        "cachekeeper_hydrate_fetched_files": report.files_fetched,
        "cachekeeper_hydrate_files_in_place": report.files_total,
        "cachekeeper_hydrate_retries": report.retries,
        "cachekeeper_hydrate_node_cache_reused_files": report.node_linked + report.node_copied,
        "cachekeeper_hydrate_node_cache_fetched_bytes": report.node_fetched_bytes,
    }
    if report.ready_seconds is not None:
        figures["cachekeeper_hydrate_ready_seconds"] = report.ready_seconds
    for name, value in figures.items():
        _make(name, reg).labels(**base).set(value)
    entries = _make("cachekeeper_hydrate_entries", reg)
    for state in ("hit", "missed", "captured"):
        entries.labels(**base, state=state).set((counts or {}).get(state, 0))
    return reg


# --- report --watch --------------------------------------------------------------------------------


class RuntimeMetrics:
    """The serving host's runtime-miss counters, served on /metrics by `report --watch --metrics-port`."""

    def __init__(self, backend: str, fingerprint: str, interval: float, cap: LabelCap | None = None) -> None:
        self.reg = registry()
        self.base = {"backend": backend, "fingerprint": fingerprint}
        self.cap = cap or LabelCap()
        self.calls = _make("cachekeeper_runtime_calls_total", self.reg)
        self.compiled = _make("cachekeeper_runtime_compiled_calls_total", self.reg)
        self.compile_s = _make("cachekeeper_runtime_compile_seconds_total", self.reg)
        self.last_round = _make("cachekeeper_report_last_round_timestamp_seconds", self.reg)
        _make("cachekeeper_report_interval_seconds", self.reg).labels(**self.base).set(interval)

    def serve(self, port: int, host: str = "0.0.0.0") -> bool:
        """Start the /metrics server in a thread; a port in use is one warning, the sidecar goes on."""
        try:
            start_http_server(port, addr=host, registry=self.reg)
        except OSError as exc:
            logs.warning(f"--metrics-port {port}: cannot serve /metrics ({exc.strerror or exc}); the reports "
                         "are still written")
            return False
        return True

    def observe(self, rows: Iterable[Any]) -> None:
        """One stored report's rows (model, shape, calls, compiled, compile_s, reasons): the compiled calls and
        their seconds by reason, those no reason names under `unknown`."""
        for r in rows:   # counts from a spool serving hosts write: clamped, a counter never goes down
            labels = {**self.base, "model": self.cap("model", str(r.model)), "shape": self.cap("shape", r.shape)}
            self.calls.labels(**labels).inc(max(r.calls, 0))
            for reason, calls, seconds in by_reason(r):
                self.compiled.labels(**labels, reason=reason).inc(calls)
                self.compile_s.labels(**labels, reason=reason).inc(seconds)

    def round_done(self) -> None:
        self.last_round.labels(**self.base).set(time.time())


def by_reason(row: Any) -> list[tuple[str, int, float]]:
    """A report row's compiled calls and seconds per reason (clamped at 0); what its reasons leave is `unknown`."""
    named = [(str(reason), max(int(n), 0), max(float(s), 0.0)) for reason, n, s in getattr(row, "reasons", ())]
    rest = max(row.compiled, 0) - sum(n for _, n, _ in named)
    rest_s = max(row.compile_s, 0.0) - sum(s for _, _, s in named)
    if rest > 0 or (rest_s > 0 and not named):
        named.append(("unknown", max(rest, 0), max(rest_s, 0.0)))
    return [(reason, n, s) for reason, n, s in named if n or s]


# --- dashboard -------------------------------------------------------------------------------------


@dataclass
class CatalogFigures:
    """What the dashboard's /metrics reports, read per scrape from the catalog (and the store)."""
    toolchains: list[dict[str, Any]] = field(default_factory=list)   # id, backend, entries, captured
    queue: dict[str, int] = field(default_factory=dict)              # status -> jobs
    expired_leases: int = 0
    served_not_prebuilt: dict[str, int] | None = None                # fingerprint -> shapes (--traffic)
    coverage: list[dict[str, Any]] | None = None                     # backend, fingerprint, built, missing


class CatalogCollector(Collector):
    """A custom collector: every scrape reads the figures afresh (`read`), nothing is cached."""

    def __init__(self, read: Callable[[], CatalogFigures]) -> None:
        self.read = read

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        f = self.read()

        def fam(name: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, METRICS[name].help, labels=METRICS[name].labels)

        built, captured = fam("cachekeeper_catalog_entries_built"), fam("cachekeeper_catalog_captured_sets")
        for t in f.toolchains:
            built.add_metric([t["backend"], t["id"]], t["entries"])
            captured.add_metric([t["backend"], t["id"]], t["captured"])
        queue = fam("cachekeeper_queue_jobs")
        for status in sorted({"pending", "running", *f.queue}):
            queue.add_metric([status], f.queue.get(status, 0))
        expired = fam("cachekeeper_queue_expired_leases")
        expired.add_metric([], f.expired_leases)
        yield from (built, captured, queue, expired)
        if f.served_not_prebuilt is not None:
            served = fam("cachekeeper_served_not_prebuilt_shapes")
            for fp, n in sorted(f.served_not_prebuilt.items()):
                served.add_metric([fp], n)
            yield served
        if f.coverage is not None:
            entries, ratio = fam("cachekeeper_coverage_entries"), fam("cachekeeper_coverage_ratio")
            for c in f.coverage:
                entries.add_metric([c["backend"], c["fingerprint"], "built"], c["built"])
                entries.add_metric([c["backend"], c["fingerprint"], "missing"], c["missing"])
                wanted = c["built"] + c["missing"]
                ratio.add_metric([c["backend"], c["fingerprint"]], c["built"] / wanted if wanted else 1.0)
            yield from (entries, ratio)


def catalog_registry(read: Callable[[], CatalogFigures]) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(CatalogCollector(read))
    return reg


def exposition(reg: CollectorRegistry) -> tuple[bytes, str]:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return generate_latest(reg), CONTENT_TYPE_LATEST


# --- prebuild --------------------------------------------------------------------------------------


def prebuild_registry(outcomes: Iterable[Any], entries: Mapping[str, tuple[str, str, str]],
                      cap: LabelCap | None = None) -> CollectorRegistry:
    """Each entry's build seconds and outcome. `entries`: entry key -> (backend, model, shape)."""
    cap = cap or LabelCap()
    reg = registry()
    seconds = _make("cachekeeper_prebuild_entry_duration_seconds", reg)
    counts = dict.fromkeys(PREBUILD_OUTCOMES, 0)
    for o in outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
        backend, model, shape = entries.get(o.key, ("", OTHER, OTHER))
        seconds.labels(backend=backend, fingerprint=o.fingerprint_id, model=cap("model", model),
                       shape=cap("shape", shape), outcome=o.status).set(o.seconds)
    totals = _make("cachekeeper_prebuild_entries", reg)
    for status, n in counts.items():
        totals.labels(outcome=status).set(n)
    _make("cachekeeper_prebuild_last_run_timestamp_seconds", reg).set(time.time())
    return reg
