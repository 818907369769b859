"""docker-compose.yml is for users (no Docker engine runs here), so its wiring is checked against
docs/services.md and the code: images, ports, env names, volumes, commands and service references."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from cachekeeper.config import load_config

REPO = Path(__file__).resolve().parents[1]
COMPOSE: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
SERVICES_DOC = (REPO / "docs" / "services.md").read_text()
CODE = "\n".join(p.read_text() for p in (REPO / "cachekeeper").rglob("*.py"))
# Read by the SDKs we call (botocore, google-auth) rather than by our code, or by the server images.
SDK_ENV = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "GOOGLE_CLOUD_PROJECT"}
IMAGE_ENV = {"POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"}
CK_SERVICES = [n for n, s in SERVICES.items() if "cachekeeper" in " ".join(map(str, s.get("command", [])))]


def documented_table() -> dict[str, tuple[str, str]]:
    """service -> (image, port) from docs/services.md's table."""
    rows = re.findall(r"^\| `([\w-]+)`[^|]*\| (`[^`]+`|built from `Dockerfile`) \| ([\d–]+) \|", SERVICES_DOC, re.M)
    return {name: (image.strip("`"), port) for name, image, port in rows}


def test_every_service_the_docs_document_exists_with_its_image_and_port() -> None:
    table = documented_table()
    assert {"postgres", "seaweedfs", "fake-gcs", "worker", "hydrate"} <= set(table)
    for name, (image, port) in table.items():
        service = SERVICES[name]
        if "Dockerfile" not in image:
            assert service["image"] == image, name
        if port != "–":
            assert f"{port}:{port}" in service.get("ports", []), name


def test_images_are_pinned() -> None:
    for name, service in SERVICES.items():
        image = service.get("image", "")
        assert image and ":" in image and not image.endswith(":latest"), name


@pytest.mark.parametrize("name", CK_SERVICES)
def test_cachekeeper_services_only_use_env_the_code_or_its_sdks_read(name: str) -> None:
    for var in SERVICES[name]["environment"]:
        assert var in SDK_ENV or var in CODE or var in IMAGE_ENV, f"{name}: {var} is read by nothing"


@pytest.mark.parametrize("name", CK_SERVICES)
def test_store_and_catalog_urls_point_at_the_services_that_serve_them(name: str) -> None:
    env = SERVICES[name]["environment"]
    pg = SERVICES["postgres"]["environment"]
    catalog = urlparse(env["CACHEKEEPER_CATALOG"])
    assert catalog.scheme == "postgresql+psycopg" and catalog.hostname == "postgres" and catalog.port == 5432
    assert (catalog.username, catalog.password, catalog.path) == (pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"],
                                                                  "/" + pg["POSTGRES_DB"])
    store = urlparse(env["CACHEKEEPER_STORE"])
    if store.scheme == "s3":
        assert urlparse(env["AWS_ENDPOINT_URL"]).netloc == "seaweedfs:8333"
        weed = SERVICES["seaweedfs"]["environment"]
        assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == (weed["AWS_ACCESS_KEY_ID"],
                                                                             weed["AWS_SECRET_ACCESS_KEY"])
        assert "-s3.port=8333" in SERVICES["seaweedfs"]["command"]
    else:
        assert store.scheme == "gs" and urlparse(env["STORAGE_EMULATOR_HOST"]).netloc == "fake-gcs:4443"
        bucket_dir = REPO / "docker" / "gcs-data" / store.netloc
        assert bucket_dir.is_dir(), "fake-gcs-server creates buckets from the folders under -data"


@pytest.mark.parametrize("name", CK_SERVICES)
def test_the_config_each_service_runs_is_mounted_and_valid(name: str) -> None:
    service = SERVICES[name]
    command = " ".join(service["command"])
    config = re.search(r"(/config/\S+\.yaml)", command)
    assert config is not None
    mounts = {m.split(":")[1]: m.split(":")[0] for m in service["volumes"]}
    host = REPO / mounts["/config"] / Path(config.group(1)).relative_to("/config")
    assert host.is_file()
    assert load_config(host).entries()


def test_references_between_services_and_volumes_resolve() -> None:
    for name, service in SERVICES.items():
        for dep in service.get("depends_on", []):
            assert dep in SERVICES, f"{name} depends on unknown {dep}"
        for mount in service.get("volumes", []):
            source = mount.split(":")[0]
            if source.startswith("."):
                assert (REPO / source).exists(), f"{name}: {source} missing"
            else:
                assert source in COMPOSE["volumes"], f"{name}: volume {source} undeclared"


def test_the_worker_prebuilds_and_the_hydrate_is_a_one_shot_after_it() -> None:
    assert "cachekeeper prebuild" in " ".join(SERVICES["worker"]["command"])
    hydrate = SERVICES["hydrate"]
    assert hydrate["command"][:2] == ["cachekeeper", "hydrate"] and hydrate["restart"] == "no"
    assert hydrate["depends_on"]["worker"]["condition"] == "service_completed_successfully"
    assert SERVICES["worker"]["build"] == "."


def test_the_dockerfile_copies_paths_that_exist() -> None:
    for line in (REPO / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            for src in line.split()[1:-1]:
                assert (REPO / src).exists(), src
