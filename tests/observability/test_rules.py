"""The alert rules and the Grafana dashboard under deploy/observability/: promtool checks the rules and runs
their unit tests on recorded series; the PrometheusRule holds the same groups as the plain file; every
query names a metric cachekeeper exposes, and docs/observability.md lists exactly those metrics."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from cachekeeper.observability.metrics import METRICS

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy" / "observability"
NAME = re.compile(r"\bcachekeeper_[a-z0-9_]+\b")


def promtool(*args: str, cwd: Path = DEPLOY) -> subprocess.CompletedProcess[str]:
    if shutil.which("promtool") is None:
        pytest.skip("promtool not installed (scripts/test installs Debian's prometheus package)")
    return subprocess.run(["promtool", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def rule_exprs() -> list[str]:
    doc = yaml.safe_load((DEPLOY / "rules.yml").read_text())
    return [r["expr"] for g in doc["groups"] for r in g["rules"]]


def grafana_exprs() -> list[str]:
    dash = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]


def test_promtool_checks_the_plain_rules_and_the_prometheusrules_groups(tmp_path: Path) -> None:
    checked = promtool("check", "rules", "rules.yml")
    assert checked.returncode == 0 and "SUCCESS: 6 rules found" in checked.stdout, checked.stdout + checked.stderr
    crd = yaml.safe_load((DEPLOY / "prometheusrule.yaml").read_text())
    assert crd["apiVersion"] == "monitoring.coreos.com/v1" and crd["kind"] == "PrometheusRule"
    (tmp_path / "from-crd.yml").write_text(yaml.safe_dump(crd["spec"]))
    from_crd = promtool("check", "rules", str(tmp_path / "from-crd.yml"))
    assert from_crd.returncode == 0, from_crd.stdout + from_crd.stderr
    assert crd["spec"] == yaml.safe_load((DEPLOY / "rules.yml").read_text()), "the two files hold the same rules"


def test_promtool_runs_the_rules_unit_tests_on_recorded_series() -> None:
    proc = promtool("test", "rules", "rules_test.yml")
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout + proc.stderr
    tested = {t["alertname"] for case in yaml.safe_load((DEPLOY / "rules_test.yml").read_text())["tests"]
              for t in case["alert_rule_test"]}
    alerts = {r["alert"] for g in yaml.safe_load((DEPLOY / "rules.yml").read_text())["groups"] for r in g["rules"]}
    assert tested == alerts, "every alert has a firing and a quiet case"


def test_the_rules_tests_fail_when_an_alert_would_not_fire(tmp_path: Path) -> None:
    """A rules test that cannot fail guards nothing: raise one threshold and promtool must say so."""
    for name in ("rules.yml", "rules_test.yml"):
        shutil.copy(DEPLOY / name, tmp_path / name)
    rules = tmp_path / "rules.yml"
    rules.write_text(rules.read_text().replace("cachekeeper_queue_expired_leases > 5",
                                               "cachekeeper_queue_expired_leases > 50"))
    proc = promtool("test", "rules", "rules_test.yml", cwd=tmp_path)
    assert proc.returncode != 0 and "CachekeeperExpiredLeasesPilingUp" in proc.stdout + proc.stderr


def test_the_zero_compile_rule_fires_only_for_a_marked_fleet_and_its_test_says_so(tmp_path: Path) -> None:
    """The strict variant matches only series a team marked zero_compile="true": without the selector, the
    unmarked host of rules_test.yml would fire too, and promtool must fail the test."""
    for name in ("rules.yml", "rules_test.yml"):
        shutil.copy(DEPLOY / name, tmp_path / name)
    rules = tmp_path / "rules.yml"
    assert rules.read_text().count('{zero_compile="true"}') == 3
    rules.write_text(rules.read_text().replace('{zero_compile="true"}', ""))
    proc = promtool("test", "rules", "rules_test.yml", cwd=tmp_path)
    assert proc.returncode != 0 and 'instance="host-2:9400"' in proc.stdout + proc.stderr


def test_every_query_of_the_rules_and_the_dashboard_names_a_metric_that_exists() -> None:
    for expr in rule_exprs() + grafana_exprs():
        names = NAME.findall(expr)
        assert names, f"{expr!r} names no cachekeeper metric"
        unknown = set(names) - set(METRICS)
        assert not unknown, f"{expr!r} names {sorted(unknown)}, which cachekeeper does not expose"
    used = {n for e in rule_exprs() + grafana_exprs() for n in NAME.findall(e)}
    assert used == set(METRICS), f"metrics no panel or rule shows: {sorted(set(METRICS) - used)}"


def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    """promtool parses each panel query as a recording rule's expression."""
    rules = [{"record": f"cachekeeper:panel_{i}", "expr": e} for i, e in enumerate(grafana_exprs())]
    (tmp_path / "panels.yml").write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    proc = promtool("check", "rules", str(tmp_path / "panels.yml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_renamed_metric_is_caught_by_the_name_check() -> None:
    bad = "sum(rate(cachekeeper_runtime_compiles_total[5m]))"
    assert set(NAME.findall(bad)) - set(METRICS) == {"cachekeeper_runtime_compiles_total"}


def test_the_docs_table_lists_exactly_the_metrics_with_their_labels() -> None:
    text = (REPO / "docs" / "observability.md").read_text()
    rows = re.findall(r"^\| `(cachekeeper_[a-z0-9_]+)` \| (\w+) \| ([^|]*) \|", text, re.M)
    assert {name for name, _, _ in rows} == set(METRICS)
    for name, kind, labels in rows:
        m = METRICS[name]
        assert kind == m.kind and labels.strip() == (", ".join(m.labels) or "—"), name
