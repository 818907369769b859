"""The role policies in deploy/policies/ grant each role exactly what cachekeeper's code calls.

Each role's real code path (builder: publish, signed; server: hydrate and a miss report; operator: gc
and verify --repair) runs against a store that records every call. Each recorded call is mapped to the
S3 action and GCS permission it needs, and the role's policy, parsed from the deploy/ file, must allow it;
the server's policy must refuse writing a blob, a manifest or a signature, and every delete.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from cachekeeper.admin.gc import plan_gc, run_gc
from cachekeeper.admin.verify import repair, verify_store
from cachekeeper.config.hydrate import HydrateOptions
from cachekeeper.hydration.engine import Target, hydrate
from cachekeeper.publish.upload import publish
from cachekeeper.reports.miss import build_report, write_report
from cachekeeper.runtime.miss_watch import CallRecord
from cachekeeper.stores.inventory import scan
from cachekeeper.stores.memory import MemoryStore
from tests.fakes import FakeBackend
from tests.harness.seaweedfs import POLICIES, render_policy

BUCKET, PREFIX = "fleet-cache", "ck"
VALUES = {"BUCKET": BUCKET, "PREFIX": PREFIX, "PROJECT": "p", "BUILDER_SA": "b@p", "SERVER_SA": "s@p",
          "OPERATOR_SA": "o@p", "SERVER_ROLE_ARN": "arn:aws:iam::1:role/server",
          "OPERATOR_ROLE_ARN": "arn:aws:iam::1:role/operator"}
Call = tuple[str, str]   # (store method, key or list prefix)

# What each Store method is on the wire.
S3_ACTION = {"put_bytes": "s3:PutObject", "put_file": "s3:PutObject", "get_bytes": "s3:GetObject",
             "get_range": "s3:GetObject", "download": "s3:GetObject", "open_range": "s3:GetObject",
             "size": "s3:GetObject", "exists": "s3:GetObject", "list": "s3:ListBucket",
             "list_info": "s3:ListBucket", "delete": "s3:DeleteObject", "check": "s3:ListBucket"}
GCS_PERMISSION = {"s3:PutObject": "storage.objects.create", "s3:GetObject": "storage.objects.get",
                  "s3:ListBucket": "storage.objects.list", "s3:DeleteObject": "storage.objects.delete"}


class RecordingStore(MemoryStore):
    """A memory store that notes every call the code under test makes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Call] = []

    def __getattribute__(self, name: str) -> Any:
        attr = super().__getattribute__(name)
        if name in S3_ACTION and callable(attr):
            def recorded(*args: Any, **kwargs: Any) -> Any:
                self.calls.append((name, str(args[0]) if args else ""))
                return attr(*args, **kwargs)
            return recorded
        return attr


# --- a small evaluator of the parsed policies ---------------------------------------------------------


def s3_allows(policy: dict[str, Any], action: str, key: str) -> bool:
    """IAM semantics for the statement forms the deploy/ policies use: an explicit Deny wins, then any Allow."""
    is_list = action == "s3:ListBucket"
    resource = f"arn:aws:s3:::{BUCKET}" if is_list else f"arn:aws:s3:::{BUCKET}/{PREFIX}/{key}"
    verdicts = []
    for st in policy["Statement"]:
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        if not any(fnmatch.fnmatchcase(action, a) for a in actions):
            continue
        if "Resource" in st:
            res = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
            hit = any(fnmatch.fnmatchcase(resource, r) for r in res)
        else:
            res = st["NotResource"] if isinstance(st["NotResource"], list) else [st["NotResource"]]
            hit = not any(fnmatch.fnmatchcase(resource, r) for r in res)
        prefixes = st.get("Condition", {}).get("StringLike", {}).get("s3:prefix")
        if hit and prefixes and is_list:
            hit = any(fnmatch.fnmatchcase(f"{PREFIX}/{key}", p) for p in prefixes)
        if hit:
            verdicts.append(st["Effect"])
    return "Deny" not in verdicts and "Allow" in verdicts


def gcs_allows(member: str, permission: str, key: str) -> bool:
    roles = {d["id"]: set(d["includedPermissions"])
             for d in yaml.safe_load_all((POLICIES / "gcs" / "roles.yaml").read_text()) if d}
    bindings = json.loads(render_policy((POLICIES / "gcs" / "bindings.json").read_text(), VALUES))["bindings"]
    name = f"projects/_/buckets/{BUCKET}/objects/{PREFIX}/{key}"
    for b in bindings:
        if member not in b["members"] or permission not in roles[b["role"].rsplit("/", 1)[-1]]:
            continue
        condition = b.get("condition")
        if condition is None:
            return True
        starts = re.findall(r'resource\.name\.startsWith\("([^"]+)"\)', condition["expression"])
        assert starts and condition["expression"].count("startsWith") == len(starts)
        # Object-name conditions never match a list (checked on the bucket): GCS evaluates them so too.
        if permission != "storage.objects.list" and any(name.startswith(s) for s in starts):
            return True
    return False


def s3_policy(role: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(render_policy((POLICIES / "s3" / f"{role}.json").read_text(), VALUES))
    return doc


MEMBER = {"builder": "serviceAccount:b@p", "server": "serviceAccount:s@p", "operator": "serviceAccount:o@p"}


# --- each role's real code path ------------------------------------------------------------------------


def _built(tmp: Path) -> Path:
    cache = tmp / "built"
    for i in range(3):
        (cache / f"0{i}").mkdir(parents=True)
        (cache / f"0{i}" / f"k{i}.neff").write_bytes(bytes([i]) * 5000)
    return cache


def as_builder(store: RecordingStore, tmp: Path) -> None:
    from cachekeeper.format.signing import SigningKey
    from cachekeeper.format.spec import EntrySpec, Shape

    spec = EntrySpec("tiny", "transformer", "fake", "full", Shape(64, 64, 1), "float32")
    publish(store, fingerprint=FakeBackend().fingerprint({}), spec=spec, roots={"cache": _built(tmp)},
            include=FakeBackend().include, signing_key=SigningKey.generate())


def as_server(store: RecordingStore, tmp: Path) -> None:
    fp = FakeBackend().fingerprint({})
    hydrate(Target(fp, tmp / "dest"), HydrateOptions(), lambda: store)
    record = CallRecord("tiny", 64, 96, 1, None, None, True, 3, 2.0, 1.7e9)
    write_report(store, build_report([record], fp.id, "fake"))


def as_operator(store: RecordingStore, tmp: Path) -> None:
    inventory = scan(store)
    repair(store, inventory, list(verify_store(store, inventory)))
    run_gc(store, plan_gc(scan(store), {FakeBackend().fingerprint({}).id}, min_age=0))


PATHS: dict[str, Callable[[RecordingStore, Path], None]] = {"builder": as_builder, "server": as_server,
                                                          "operator": as_operator}


@pytest.fixture(scope="module")
def calls(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Call]]:
    """Each role's calls, run in order on one store (the server hydrates what the builder published)."""
    store = RecordingStore()
    out: dict[str, list[Call]] = {}
    for role, run in PATHS.items():
        store.calls = []
        run(store, tmp_path_factory.mktemp(role))
        out[role] = store.calls
    return out


@pytest.mark.parametrize("role", list(PATHS))
def test_each_role_is_granted_every_call_its_code_makes(role: str, calls: dict[str, list[Call]]) -> None:
    made = {(S3_ACTION[method], key) for method, key in calls[role]}
    assert made, "the role's code path made calls"
    policy = s3_policy(role)
    denied_s3 = sorted(c for c in made if not s3_allows(policy, *c))
    denied_gcs = sorted(c for c in made if not gcs_allows(MEMBER[role], GCS_PERMISSION[c[0]], c[1]))
    assert denied_s3 == [] and denied_gcs == []


def test_the_code_paths_write_where_the_layout_says(calls: dict[str, list[Call]]) -> None:
    def written(role: str) -> set[str]:
        return {key.split("/", 1)[0] for method, key in calls[role] if S3_ACTION[method] == "s3:PutObject"}

    assert written("builder") == {"blobs", "manifests", "signatures"}
    assert written("server") == {"reports"}
    assert any(S3_ACTION[m] == "s3:DeleteObject" for m, _ in calls["operator"])


@pytest.mark.parametrize("key", ["blobs/sha256/ab/" + "ab" * 32, "manifests/0123456789abcdef/" + "e" * 32 + ".json",
                                 "manifests/0123456789abcdef/captured/0123456789abcdef.json",
                                 "signatures/" + "ab" * 32])
def test_a_server_cannot_write_anything_every_host_runs(key: str) -> None:
    assert not s3_allows(s3_policy("server"), "s3:PutObject", key)
    assert not gcs_allows(MEMBER["server"], "storage.objects.create", key)
    bucket = s3_policy("bucket-policy")["Statement"][0]
    assert bucket["Effect"] == "Deny" and s3_allows({"Statement": [{**bucket, "Effect": "Allow"}]},
                                                     "s3:PutObject", key), "the bucket policy denies it too"


@pytest.mark.parametrize("role", ["builder", "server"])
def test_only_the_operator_deletes(role: str) -> None:
    key = "blobs/sha256/ab/" + "ab" * 32
    assert not s3_allows(s3_policy(role), "s3:DeleteObject", key)
    assert not gcs_allows(MEMBER[role], "storage.objects.delete", key)
    assert s3_allows(s3_policy("operator"), "s3:DeleteObject", key)
    assert gcs_allows(MEMBER["operator"], "storage.objects.delete", key)


def test_a_builder_writes_no_miss_reports() -> None:
    assert not s3_allows(s3_policy("builder"), "s3:PutObject", "reports/0123456789abcdef/x.json")


def test_the_seaweedfs_identities_mirror_the_roles() -> None:
    config = json.loads(render_policy((POLICIES / "seaweedfs" / "s3.json").read_text(), {
        **VALUES, **{f"{r.upper()}_{k}": "x" for r in PATHS for k in ("ACCESS_KEY", "SECRET_KEY")}}))
    actions = {i["name"]: set(i["actions"]) for i in config["identities"]}
    assert {a for a in actions["server"] if a.startswith("Write")} == {f"Write:{BUCKET}/{PREFIX}/reports/*"}
    assert {a for a in actions["builder"] if a.startswith("Write")} == {
        f"Write:{BUCKET}/{PREFIX}/{d}/*" for d in ("blobs", "manifests", "signatures")}
