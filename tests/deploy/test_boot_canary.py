"""The canary in the boot examples: a pre-rollout check on the hydrated dir, wired as docs/boot.md says: in
Kubernetes an init container after the hydrate (a pod that would compile never starts, and maxUnavailable 0
keeps the old pods serving), in systemd a oneshot unit after the hydrate that a rollout tool starts; both
replay the config and dest the hydrate filled."""

from __future__ import annotations

from typing import Any

from .conftest import SYSTEMD, env_file, k8s_documents, unit_values

CANARY = SYSTEMD / "cachekeeper-canary.service"
HYDRATE = SYSTEMD / "cachekeeper-hydrate.service"


def _option(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _deployment(name: str = "flux-inference") -> dict[str, Any]:
    [deployment] = [d for d in k8s_documents() if d["kind"] == "Deployment" and d["metadata"]["name"] == name]  # type: ignore[index]
    return deployment


def test_kubernetes_replays_the_hydrated_dir_after_the_hydrate_and_before_the_server() -> None:
    deployment = _deployment()
    pod = deployment["spec"]["template"]["spec"]
    names = [c["name"] for c in pod["initContainers"]]
    assert names.index("hydrate") < names.index("canary"), "the canary replays what the hydrate placed"
    [canary] = [c for c in pod["initContainers"] if c["name"] == "canary"]
    assert "restartPolicy" not in canary, "a real init step: the server starts only after it exits 0"
    hydrate = pod["initContainers"][0]["command"][-1].split()
    argv = canary["command"]
    assert argv[:2] == ["cachekeeper", "canary"]
    assert _option(argv, "--config") == _option(hydrate, "--config")
    assert _option(argv, "--dest") == _option(hydrate, "--dest")
    assert canary["image"] == pod["containers"][0]["image"], "the server's image: its toolchain"
    assert {e["name"]: e["value"] for e in canary["env"]}["TMPDIR"] == \
        {e["name"]: e["value"] for e in pod["containers"][0]["env"]}["TMPDIR"], "the server's precompiled header"
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_systemd_runs_the_canary_once_after_the_hydrate_on_the_same_config_and_dest() -> None:
    assert unit_values(CANARY, "Service", "Type") == ["oneshot"]
    assert unit_values(CANARY, "Unit", "After") == ["cachekeeper-hydrate.service"]
    assert unit_values(CANARY, "Unit", "Requires") == ["cachekeeper-hydrate.service"]
    assert unit_values(CANARY, "Service", "EnvironmentFile") == unit_values(HYDRATE, "Service", "EnvironmentFile")
    [start] = unit_values(CANARY, "Service", "ExecStart")
    assert " canary --config ${CACHEKEEPER_CONFIG} --dest ${CACHEKEEPER_DEST}" in start
    assert {"CACHEKEEPER_CONFIG", "CACHEKEEPER_DEST"} <= env_file(SYSTEMD / "hydrate.env").keys()
