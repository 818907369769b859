"""The metrics each command writes, read back by prometheus_client's own parser, and the bad input around
them: each is one warning line and the command still does its work (a metrics problem never fails a boot,
with --best-effort or without)."""

from __future__ import annotations

import contextlib
import json
import resource
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cachekeeper.observability import metrics as m
from cachekeeper.runtime.miss_watch import CallRecord, Spool
from tests.fakes import served

from .conftest import Ck, samples, value, warnings


def hydrate_json(ck: Ck, *args: str, ok: bool = True, **env: str) -> tuple[dict[str, object], str]:
    proc = ck.run("hydrate", "--config", str(ck.config), "--dest", str(ck.tmp / "dest"), "--json", *args, ok=ok,
                  **env)
    return (json.loads(proc.stdout) if proc.stdout else {}), proc.stderr


# --- hydrate ---------------------------------------------------------------------------------------


def test_hydrate_writes_its_figures_as_a_textfile_the_client_parser_reads(built: Ck) -> None:
    target = built.tmp / "metrics" / "hydrate.prom"
    target.parent.mkdir()
    report, err = hydrate_json(built, "--metrics-file", str(target))
    text = target.read_text()
    labels = {"backend": "fake", "fingerprint": str(report["fingerprint_id"]), "model": "all"}
    assert value(text, "cachekeeper_hydrate_outcome", outcome="done", **labels) == 1
    assert value(text, "cachekeeper_hydrate_outcome", outcome="noop", **labels) == 0
    assert value(text, "cachekeeper_hydrate_fetched_files", **labels) == report["files_fetched"] > 0
    assert value(text, "cachekeeper_hydrate_fetched_bytes", **labels) == report["bytes_fetched"] > 0
    assert value(text, "cachekeeper_hydrate_entries", state="hit", **labels) == 2
    assert value(text, "cachekeeper_hydrate_entries", state="missed", **labels) == 0
    assert value(text, "cachekeeper_hydrate_duration_seconds", **labels) == pytest.approx(report["seconds"])
    assert [p.name for p in target.parent.iterdir()] == ["hydrate.prom"], "written by a rename, no temp left"
    assert warnings(err) == []
    # A rerun is a no-op and says so; the file is replaced whole.
    hydrate_json(built, "--metrics-file", str(target))
    assert value(target.read_text(), "cachekeeper_hydrate_outcome", outcome="noop", **labels) == 1


def test_the_env_var_and_the_config_key_name_the_file_too(built: Ck) -> None:
    hydrate_json(built, CACHEKEEPER_METRICS_FILE=str(built.tmp / "from-env.prom"))
    assert samples((built.tmp / "from-env.prom").read_text())
    built.config.write_text(built.config.read_text() + "hydrate:\n  metrics_file: from-config.prom\n")
    hydrate_json(built)
    assert samples((built.tmp / "from-config.prom").read_text()), "relative to the config's dir"


@pytest.mark.parametrize("best_effort", [(), ("--best-effort",)])
@pytest.mark.parametrize("where", ["missing dir", "a directory", "a file as its dir"])
def test_an_unwritable_metrics_file_is_one_warning_and_the_boot_goes_on(built: Ck, best_effort: tuple[str, ...],
                                                                        where: str) -> None:
    (built.tmp / "taken").mkdir()
    (built.tmp / "plain").write_text("x")
    target = {"missing dir": built.tmp / "no" / "such" / "dir" / "h.prom", "a directory": built.tmp / "taken",
              "a file as its dir": built.tmp / "plain" / "h.prom"}[where]
    report, err = hydrate_json(built, "--metrics-file", str(target), *best_effort)
    assert report["files_fetched"] and (served(built.tmp / "dest") / "large.bin").exists()
    assert len(warnings(err)) == 1 and "--metrics-file" in warnings(err)[0] and "unaffected" in warnings(err)[0]


def test_a_failed_hydrate_still_writes_its_outcome_and_keeps_its_exit_code(ck: Ck) -> None:
    """Nothing is built: without --best-effort the boot fails as before (exit 6) and the file says
    `failed`; with it, the boot goes on and the file says `fell_back`."""
    target = ck.tmp / "h.prom"
    proc = ck.run("hydrate", "--config", str(ck.config), "--dest", str(ck.tmp / "d"), "--metrics-file",
                  str(target), ok=False)
    plain = ck.run("hydrate", "--config", str(ck.config), "--dest", str(ck.tmp / "d2"), ok=False)
    assert proc.returncode == plain.returncode != 0
    assert value(target.read_text(), "cachekeeper_hydrate_outcome", outcome="failed") == 1
    ck.run("hydrate", "--config", str(ck.config), "--dest", str(ck.tmp / "d"), "--metrics-file", str(target),
           "--best-effort")
    assert value(target.read_text(), "cachekeeper_hydrate_outcome", outcome="fell_back") == 1
    assert value(target.read_text(), "cachekeeper_hydrate_outcome", outcome="failed") == 0


def test_prometheus_client_is_imported_only_when_metrics_are_asked_for(built: Ck) -> None:
    code = ("import sys\nfrom cachekeeper.cli import main\nsys.argv = ['cachekeeper', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print('prometheus_client' in sys.modules, 'cachekeeper.observability.metrics' in sys.modules)\n")
    base = ["hydrate", "--config", str(built.config), "--dest", str(built.tmp / "dest")]

    def loaded(*extra: str) -> str:
        proc = subprocess.run([sys.executable, "-c", code, *base, *extra], capture_output=True, text=True,
                              env=built.vars, cwd=built.tmp, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.split("\n")[-2]

    assert loaded() == "False False"
    assert loaded("--metrics-file", str(built.tmp / "h.prom")) == "True True"


def _median_cost(ck: Ck, *args: str, runs: int = 7) -> tuple[float, float]:
    """(wall, CPU) medians of a no-op hydrate, interpreter start included; CPU is user + system of the
    child, what the wall would be on an idle host."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        report, _ = hydrate_json(ck, *args)
        walls.append(time.monotonic() - t0)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        assert report["noop"] is True
    return statistics.median(walls), statistics.median(cpus)


def test_a_noop_hydrate_stays_under_half_a_second_with_and_without_a_metrics_file(built: Ck) -> None:
    """The target is 0.5 s (benchmarks/hydrate_noop.py on an idle host). A shared 2-core test box's load
    stretches the wall of both alike, so the bound is on the CPU the run itself spends, and the metrics
    file's own cost (importing prometheus_client, one small file) is bounded separately."""
    hydrate_json(built)
    plain = _median_cost(built)
    with_file = _median_cost(built, "--metrics-file", str(built.tmp / "h.prom"))
    print(f"no-op hydrate, median of 7: wall {plain[0]:.3f}s / {with_file[0]:.3f}s, CPU {plain[1]:.3f}s / "
          f"{with_file[1]:.3f}s (plain / --metrics-file)")
    assert plain[1] < 0.5 and with_file[1] < 0.5, (plain, with_file)
    assert with_file[1] - plain[1] < 0.15, f"--metrics-file costs {with_file[1] - plain[1]:.3f}s of CPU"


# --- prebuild ----------------------------------------------------------------------------------------


def test_prebuild_writes_each_entrys_seconds_and_outcome(ck: Ck) -> None:
    ck.run("prebuild", str(ck.config), "--metrics-file", str(ck.tmp / "p.prom"))
    text = (ck.tmp / "p.prom").read_text()
    assert value(text, "cachekeeper_prebuild_entries", outcome="built") == 2
    durations = [(dict(ls), v) for (n, ls), v in samples(text).items()
                 if n == "cachekeeper_prebuild_entry_duration_seconds"]
    assert sorted(d["shape"] for d, _ in durations) == ["128x64x1", "64x64x1"]
    assert all(d["model"] == "tiny" and d["outcome"] == "built" and v > 0 for d, v in durations)
    ck.run("prebuild", str(ck.config), "--metrics-file", str(ck.tmp / "p.prom"))
    assert value((ck.tmp / "p.prom").read_text(), "cachekeeper_prebuild_entries", outcome="present") == 2


def test_an_unreachable_pushgateway_is_one_warning_and_the_build_is_published(ck: Ck) -> None:
    with socket.socket() as s:   # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = ck.run("prebuild", str(ck.config), "--metrics-push", f"http://127.0.0.1:{port}")
    assert len(warnings(proc.stderr)) == 1 and "--metrics-push" in warnings(proc.stderr)[0], proc.stderr
    assert "2 built" in proc.stderr
    assert ck.run("coverage", str(ck.config)).stdout.count("built") == 2


# --- report --watch ----------------------------------------------------------------------------------


def _call(model: str, height: int, compiled: bool) -> CallRecord:
    return CallRecord(model, height, 64, 1, None, None, compiled, int(compiled), 0.5 if compiled else 0.1, 1.7e9)


def test_a_metrics_port_in_use_is_one_warning_and_the_reports_are_still_written(ck: Ck) -> None:
    Spool(ck.tmp / "spool").append(_call("tiny", 64, True))
    (ck.tmp / "store").mkdir()
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = ck.popen("report", "--config", str(ck.config), "--spool", str(ck.tmp / "spool"), "--watch", "1",
                        "--metrics-port", str(port), CACHEKEEPER_STORE=f"file://{ck.tmp / 'store'}")
        time.sleep(2.5)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err, err
    assert len(warnings(err)) == 1 and f"--metrics-port {port}" in warnings(err)[0], err
    assert len(list((ck.tmp / "store" / "reports").rglob("*.json"))) == 1


def test_metrics_port_without_watch_is_a_usage_error(ck: Ck) -> None:
    proc = ck.run("report", "--config", str(ck.config), "--metrics-port", "9400", ok=False)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode == 2 and len(errors) == 1 and "--watch" in errors[0]


# --- label cardinality -----------------------------------------------------------------------------


def test_model_and_shape_labels_are_capped_with_one_warning_each() -> None:
    said: list[str] = []
    sidecar = m.RuntimeMetrics("fake", "0123456789abcdef", 60, m.LabelCap(cap=50, warn=said.append))

    class Row:
        def __init__(self, i: int) -> None:
            self.model, self.shape, self.calls, self.compiled, self.compile_s = f"model-{i}", "64x64x1", 2, 1, 0.5

    sidecar.observe([Row(i) for i in range(80)])
    sidecar.observe([Row(i) for i in range(80, 90)])
    from prometheus_client import generate_latest

    text = generate_latest(sidecar.reg).decode()
    models = {dict(ls)["model"] for (n, ls), _ in samples(text).items() if n == "cachekeeper_runtime_calls_total"}
    assert len(models) == 51 and "other" in models and "model-0" in models and "model-60" not in models
    assert value(text, "cachekeeper_runtime_calls_total", model="other") == 2 * 40, "nothing is lost, only merged"
    assert len(said) == 1 and "more than 50 distinct model values" in said[0]


def test_a_report_sidecar_with_too_many_models_warns_once_on_stderr(ck: Ck) -> None:
    spool = Spool(ck.tmp / "spool")
    for i in range(m.CAP + 10):
        spool.append(_call(f"m{i}", 64, i % 2 == 0))
    (ck.tmp / "store").mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = ck.popen("report", "--config", str(ck.config), "--spool", str(ck.tmp / "spool"), "--watch", "1",
                    "--metrics-port", str(port), CACHEKEEPER_STORE=f"file://{ck.tmp / 'store'}")
    try:
        import urllib.request

        deadline = time.monotonic() + 20
        text = ""
        while "cachekeeper_runtime_calls_total{" not in text and time.monotonic() < deadline:
            time.sleep(0.3)
            with contextlib.suppress(OSError):
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert value(text, "cachekeeper_runtime_calls_total", model="other") == 10
    capped = [w for w in warnings(err) if "distinct model values" in w]
    assert len(capped) == 1, err


def test_every_metric_is_named_by_the_conventions() -> None:
    for name, metric in m.METRICS.items():
        assert name.startswith("cachekeeper_") and name == name.lower()
        assert name.endswith("_total") == (metric.kind == "counter"), name
        assert not any(bad in name for bad in ("_ms", "_milliseconds", "_mb", "_kb", "_percent")), name
        if "seconds" in name or "bytes" in name:
            unit = "seconds" if "seconds" in name else "bytes"
            assert name.removesuffix("_total").endswith(unit), f"{name}: the unit is the last word"
        assert "le" not in metric.labels and "quantile" not in metric.labels


def test_the_boot_docs_three_metrics_lines_parse_with_the_real_cli() -> None:
    import re
    import shlex

    from cachekeeper.cli import _register, cli

    boot_doc = (Path(__file__).resolve().parents[2] / "docs" / "boot.md").read_text()
    block = boot_doc[boot_doc.index("the three lines a team adds"):]
    block = block[block.index("```sh") + 5:]
    lines = [re.sub(r"\s+#.*$", "", line) for line in block[:block.index("```")].strip().splitlines()]
    assert len(lines) == 3
    _register()
    for line in lines:
        argv = shlex.split(line)
        assert argv[0] == "cachekeeper"
        command = cli.commands[argv[1]]
        ctx = command.make_context(argv[1], argv[2:])   # an unknown flag or a bad value raises here
        assert any(k.startswith("metrics") and v for k, v in ctx.params.items()) or argv[1] == "dashboard"
