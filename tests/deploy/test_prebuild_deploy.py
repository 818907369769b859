"""deploy/prebuild: each file passes its engine's published schema, and the command it runs is one the
`cachekeeper` CLI accepts (parsed by the real command, not by eye)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import kubernetes_validate
import pytest
import yaml
from botocore.loaders import create_loader
from botocore.model import ServiceModel
from botocore.validate import ParamValidator

from cachekeeper.cli import _register, cli

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "prebuild"
K8S_VERSION = "1.33.0"   # backoffLimitPerIndex is GA from 1.33


def _k8s(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((DEPLOY / "kubernetes" / name).read_text())
    assert isinstance(doc, dict)
    return doc


def _container(doc: dict[str, Any]) -> dict[str, Any]:
    [container] = doc["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


def _parses(args: list[str]) -> click.Context:
    """The args as the real CLI parses them (UsageError/NoSuchOption if a flag does not exist)."""
    _register()
    name, *rest = args
    command = cli.get_command(click.Context(cli), name)
    assert command is not None, f"no command {name!r}"
    return command.make_context(name, rest)


@pytest.mark.parametrize("name", ["catalog-db-upgrade-job.yaml", "prebuild-indexed-job.yaml"])
def test_kubernetes_manifests_pass_the_strict_schema(name: str) -> None:
    kubernetes_validate.validate(_k8s(name), K8S_VERSION, strict=True)


def test_a_broken_manifest_is_caught_by_the_same_check() -> None:
    doc = _k8s("prebuild-indexed-job.yaml")
    doc["spec"]["completionMode"] = 8          # a number where the schema wants a string
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_the_indexed_job_runs_n_waiting_workers_on_the_catalog_the_upgrade_job_migrates() -> None:
    job, upgrade = _k8s("prebuild-indexed-job.yaml"), _k8s("catalog-db-upgrade-job.yaml")
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] > 1
    ctx = _parses(_container(job)["args"])
    assert ctx.params["wait"] and ctx.params["lease"] > ctx.params["heartbeat"]
    assert _container(upgrade)["args"] == ["db", "upgrade"]
    _parses(_container(upgrade)["args"])
    catalog_of = [{e["name"]: e for e in _container(d)["env"]}["CACHEKEEPER_CATALOG"] for d in (job, upgrade)]
    assert catalog_of[0] == catalog_of[1], "both jobs use the same catalog secret"


def _batch() -> tuple[ServiceModel, ParamValidator]:
    loader = create_loader()
    return ServiceModel(loader.load_service_model("batch", "service-2")), ParamValidator()


@pytest.mark.parametrize(("name", "operation"), [("job-definition.json", "RegisterJobDefinition"),
                                                  ("submit-array-job.json", "SubmitJob")])
def test_aws_batch_files_pass_the_documented_request_shape(name: str, operation: str) -> None:
    model, validator = _batch()
    params = json.loads((DEPLOY / "aws-batch" / name).read_text())
    report = validator.validate(params, model.operation_model(operation).input_shape)
    assert not report.has_errors(), report.generate_report()


def test_a_broken_job_definition_is_caught_by_the_same_check() -> None:
    model, validator = _batch()
    params = json.loads((DEPLOY / "aws-batch" / "job-definition.json").read_text())
    params["containerProperties"]["command"] = "prebuild ck.yaml"    # a string where a list is documented
    assert validator.validate(params, model.operation_model("RegisterJobDefinition").input_shape).has_errors()


def test_the_array_job_shards_by_its_array_index_with_as_many_shards_as_children() -> None:
    definition = json.loads((DEPLOY / "aws-batch" / "job-definition.json").read_text())
    submit = json.loads((DEPLOY / "aws-batch" / "submit-array-job.json").read_text())
    params = {**definition["parameters"], **submit["parameters"]}
    # AWS Batch substitutes Ref::name with the job's parameters before the container starts.
    args = [params[a[5:]] if a.startswith("Ref::") else a for a in definition["containerProperties"]["command"]]
    ctx = _parses(args)
    assert ctx.params["no_catalog"] and ctx.params["shard"] == str(submit["arrayProperties"]["size"])
