"""deploy/boot/kubernetes.yaml, checked with PyPI's kubernetes-validate (the Kubernetes OpenAPI schemas,
strict), and wired as documented: an initContainer hydrates an emptyDir the server shares, and the server
reads the env it exported; the server's spooled calls are reported by preStop and by a report sidecar."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cachekeeper.config import load_config

from .conftest import BOOT, k8s_documents

KUBERNETES_VERSION = "1.30.0"   # native sidecars (initContainers with restartPolicy: Always) are GA from 1.29


def _validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "-k", KUBERNETES_VERSION,
                           str(path)], capture_output=True, text=True, check=False)


def _pod(name: str = "flux-inference") -> dict[str, Any]:
    [deployment] = [d for d in k8s_documents() if d["kind"] == "Deployment"
                    and d["metadata"]["name"] == name]  # type: ignore[index]
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]  # type: ignore[index]
    return pod


def test_the_manifests_pass_kubernetes_validate() -> None:
    pytest.importorskip("kubernetes_validate")
    proc = _validate(BOOT / "kubernetes.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("passed for resource") == 3


def test_the_validator_catches_a_wrong_field(tmp_path: Path) -> None:
    pytest.importorskip("kubernetes_validate")
    bad = tmp_path / "bad.yaml"
    bad.write_text((BOOT / "kubernetes.yaml").read_text().replace("mountPath: /cache\n", "mountpath: /cache\n", 1))
    assert _validate(bad).returncode != 0


def test_an_init_container_hydrates_the_empty_dir_the_server_reads() -> None:
    pod = _pod()
    [volume] = [v for v in pod["volumes"] if "emptyDir" in v]
    hydrate, server = pod["initContainers"][0], pod["containers"][0]
    assert hydrate["name"] == "hydrate" and "restartPolicy" not in hydrate  # a real init step, run to completion
    for c in (hydrate, server):
        assert {"name": volume["name"], "mountPath": "/cache"} in c["volumeMounts"]
    script = hydrate["command"][-1]
    assert "cachekeeper hydrate" in script and "--deadline" in script and "--best-effort" in script
    exported = script.split("--output ")[1].split()[0]
    assert exported.startswith("/cache/") and server["command"][-1].startswith(f". {exported} && exec ")
    assert hydrate["image"] == server["image"], "the same image: the same toolchain fingerprint"
    tmpdirs = {e["value"] for c in (hydrate, server) for e in c["env"] if e["name"] == "TMPDIR"}
    assert len(tmpdirs) == 1 and tmpdirs.pop().startswith("/cache/"), "the PCH lands where the server looks"


def _spool_mount(container: dict[str, Any]) -> str:
    """The volume that holds the container's CACHEKEEPER_SPOOL (the one mounted at its longest prefix)."""
    [spool] = [e["value"] for e in container["env"] if e["name"] == "CACHEKEEPER_SPOOL"]
    mounts = [m for m in container["volumeMounts"] if spool.startswith(m["mountPath"].rstrip("/") + "/")]
    assert mounts, f"{container['name']}: {spool} is on no volume (each container would spool apart)"
    return f"{max(mounts, key=lambda m: len(m['mountPath']))['name']}:{spool}"


def test_runtime_misses_are_reported_by_pre_stop_and_a_sidecar() -> None:
    pod = _pod()
    server = pod["containers"][0]
    pre_stop = server["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[:2] == ["cachekeeper", "report"] and "--watch" not in pre_stop
    [sidecar] = [c for c in pod["initContainers"] if c.get("restartPolicy") == "Always"]
    assert sidecar["command"][:2] == ["cachekeeper", "report"] and "--watch" in sidecar["command"]
    assert _spool_mount(sidecar) == _spool_mount(server), "the reporter reads the spool the server writes"


def test_capture_publish_is_only_a_commented_opt_in() -> None:
    text = (BOOT / "kubernetes.yaml").read_text()
    assert all("--publish" not in line or line.startswith("# ") for line in text.splitlines())
    assert "capture: publish" in text


def test_the_config_map_holds_a_valid_cachekeeper_config(tmp_path: Path) -> None:
    [config_map] = [d for d in k8s_documents() if d["kind"] == "ConfigMap"]
    path = tmp_path / "prebuild.yaml"
    path.write_text(config_map["data"]["prebuild.yaml"])  # type: ignore[index]
    assert [e.spec.shape.label() for e in load_config(str(path)).entries()] == ["1024x1024x1"]


def test_the_node_form_shares_a_host_path_node_cache_and_starts_the_server_at_the_ready_marker() -> None:
    pod = _pod("flux-inference-node")
    [node] = [v for v in pod["volumes"] if "hostPath" in v]
    [hydrate] = pod["initContainers"]
    server = pod["containers"][0]
    assert hydrate["restartPolicy"] == "Always", "a native sidecar: phase 2 goes on after the server starts"
    assert {"name": node["name"], "mountPath": "/node"} in hydrate["volumeMounts"]
    assert {"name": "CACHEKEEPER_NODE_CACHE", "value": "/node"} in hydrate["env"]
    script = hydrate["command"][-1]
    assert "--ready-after" in script and "exec cachekeeper report" in script   # never exits after phase 2
    assert "--watch" in script.split("exec cachekeeper report")[1]
    assert _spool_mount(hydrate) == _spool_mount(server), "the reporter reads the spool the server writes"
    probe = hydrate["startupProbe"]["exec"]["command"]
    dest = script.split("--dest ")[1].split()[0]
    assert probe == ["test", "-f", f"{dest}/.cachekeeper/ready"]
    env_file = script.split("--env-file ")[1].split()[0]
    assert server["command"][-1].startswith(f". {env_file} && exec ")
    assert all(m["name"] != node["name"] for m in server["volumeMounts"]), "the server never sees the node cache"
