"""The copy-ready boot files under deploy/boot, and the `cachekeeper` invocations they contain."""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

BOOT = Path(__file__).resolve().parents[2] / "deploy" / "boot"
SYSTEMD = BOOT / "systemd"


def env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a systemd EnvironmentFile (comments and blanks skipped)."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def unit_values(path: Path, section: str, key: str) -> list[str]:
    """Every value of `key` in `section` (systemd allows a key more than once; configparser does not)."""
    values: list[str] = []
    current = ""
    for line in path.read_text().splitlines():
        if line.startswith("["):
            current = line.strip("[]")
        elif current == section and line.startswith(f"{key}="):
            values.append(line.partition("=")[2])
    return values


def k8s_documents() -> list[dict[str, object]]:
    return [d for d in yaml.safe_load_all((BOOT / "kubernetes.yaml").read_text()) if d]


def invocations() -> list[tuple[str, list[str]]]:
    """(where, argv) of every `cachekeeper ...` call in the boot files, with ${VAR} from hydrate.env."""
    env = env_file(SYSTEMD / "hydrate.env")
    found: list[tuple[str, list[str]]] = []

    def add(where: str, text: str) -> None:
        for part in text.split("&&"):
            for key, value in env.items():
                part = part.replace("${" + key + "}", value)
            argv = shlex.split(part.split(">")[0])
            argv = argv[1:] if argv[:1] == ["exec"] else argv   # a sidecar's `... && exec cachekeeper ...`
            if argv and argv[0].rsplit("/", 1)[-1] == "cachekeeper":
                found.append((where, argv[1:]))

    for unit in sorted(SYSTEMD.glob("*.service")):
        for key in ("ExecStart", "ExecStartPost", "ExecStop"):
            for value in unit_values(unit, "Service", key):
                add(f"{unit.name} {key}", value.lstrip("-"))
    for line in (BOOT / "ec2-user-data.sh").read_text().splitlines():
        if not line.startswith("#"):
            add("ec2-user-data.sh", line)
    for doc in k8s_documents():
        if doc.get("kind") != "Deployment":
            continue
        pod = doc["spec"]["template"]["spec"]  # type: ignore[index]
        for c in pod["initContainers"] + pod["containers"]:
            commands = [c["command"]]
            pre_stop = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
            if pre_stop:
                commands.append(pre_stop)
            for cmd in commands:
                text = cmd[-1] if cmd[:2] == ["/bin/sh", "-c"] else shlex.join(cmd)
                add(f"kubernetes.yaml {c['name']}", text)
    return found
