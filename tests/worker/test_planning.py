"""The pure parts of the fleet: shard parsing and the cost-balanced split, the versioned job payload,
device slots for build.workers, and which workdirs count as abandoned."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cachekeeper.backends.base import ModelRef
from cachekeeper.backends.neuron.backend import NeuronBackend
from cachekeeper.backends.tpu.backend import TPUBackend
from cachekeeper.config import MatrixEntry
from cachekeeper.errors import ConfigError, QueuePayloadError, UsageError
from cachekeeper.format.spec import EntrySpec, Shape
from cachekeeper.worker import payload
from cachekeeper.worker.devices import slot_envs
from cachekeeper.worker.lease import Backoff, LeaseSettings
from cachekeeper.worker.shard import Shard, parse_shard, split
from cachekeeper.worker.workdirs import sweep_stale, workdir

# --- shards ------------------------------------------------------------------------------------------


def test_a_shard_is_given_as_i_of_n_or_read_from_the_engine_index() -> None:
    assert parse_shard("2/8", {}) == Shard(2, 8)
    assert parse_shard("8", {"JOB_COMPLETION_INDEX": "3"}) == Shard(3, 8)
    assert parse_shard("8", {"AWS_BATCH_JOB_ARRAY_INDEX": "7"}) == Shard(7, 8)


@pytest.mark.parametrize(("text", "env", "says"), [
    ("8/8", {}, "shard 8/8: shard index 8 is out of range 0..7"),
    ("-1/4", {}, "shard -1/4: shard index -1 is out of range 0..3"),
    ("4", {"AWS_BATCH_JOB_ARRAY_INDEX": "9"}, "AWS_BATCH_JOB_ARRAY_INDEX=9: shard index 9 is out of range 0..3"),
    ("4", {}, "no shard index given and neither JOB_COMPLETION_INDEX nor AWS_BATCH_JOB_ARRAY_INDEX is set"),
    ("a/b", {}, "expected I/N or N with whole numbers"),
    ("0/0", {}, "the shard count must be at least 1"),
])
def test_a_bad_shard_is_one_usage_error(text: str, env: dict[str, str], says: str) -> None:
    with pytest.raises(UsageError, match=says.replace(".", r"\.")):
        parse_shard(text, env)


def test_the_split_covers_every_key_once_and_is_the_same_in_every_process() -> None:
    keys = [f"{i:032x}" for i in range(101)]
    shards = split(keys, 4, {})
    assert sorted(k for s in shards for k in s) == sorted(keys)
    assert [len(s) for s in shards] == [26, 25, 25, 25]
    assert split(list(reversed(keys)), 4, {}) == shards    # input order does not matter


def test_the_split_balances_recorded_build_cost() -> None:
    costs = {"big": 600.0, "mid1": 300.0, "mid2": 300.0, **{f"s{i}": 100.0 for i in range(6)}}
    shards = split(list(costs), 2, costs)
    loads = [sum(costs[k] for k in s) for s in shards]
    assert loads == [900.0, 900.0]
    # Unknown costs weigh the median of the known ones.
    shards = split(["a", "b", "c", "unknown"], 2, {"a": 10.0, "b": 1.0, "c": 1.0})
    assert sorted(map(sorted, shards)) == [["a"], ["b", "c", "unknown"]]


# --- queue payload -----------------------------------------------------------------------------------


def _entry() -> MatrixEntry:
    spec = EntrySpec(model="m", component="transformer", backend="fake", mode="full", shape=Shape(64, 64, 1),
                     dtype="float32", revision="r")
    return MatrixEntry(spec, ModelRef("m", "transformer", path="/models/m"))


def test_a_payload_round_trips_and_carries_its_version() -> None:
    text = payload.encode(_entry())
    assert json.loads(text)["v"] == payload.PAYLOAD_VERSION
    assert payload.decode(text, "fp/k") == _entry()


@pytest.mark.parametrize(("doc", "says"), [
    ({"spec": {}, "model": {}}, "payload version 1, written by an older cachekeeper"),
    ({"v": 2, "spec": {}, "model": {"pipeline": True}}, "payload version 2, written by an older cachekeeper; "
                                                        "this worker reads version 3"),
    ({"v": 99, "spec": {}, "model": {}}, "payload version 99, written by a newer or unknown cachekeeper"),
    ("not json", "payload version ?"),
])
def test_a_payload_of_another_version_is_refused_by_version(doc: object, says: str) -> None:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    with pytest.raises(QueuePayloadError, match=r"queue job fp/k has " + says.replace("?", r"\?")):
        payload.decode(text, "fp/k")


def test_a_current_version_payload_with_fields_this_worker_lacks_is_refused_not_a_type_error() -> None:
    doc = json.loads(payload.encode(_entry()))
    doc["model"]["fp8_recipe"] = "e4m3"
    with pytest.raises(QueuePayloadError, match="malformed version-3 payload"):
        payload.decode(json.dumps(doc), "fp/k")


# --- lease -------------------------------------------------------------------------------------------


def test_the_lease_must_outlast_the_heartbeat() -> None:
    LeaseSettings(2, 0.5)
    with pytest.raises(UsageError, match=r"the lease \(5 s\) is not longer than the heartbeat \(5 s\)"):
        LeaseSettings(5, 5)
    with pytest.raises(UsageError, match="the heartbeat must be a positive"):
        LeaseSettings(5, 0)


def test_waiting_for_held_entries_polls_soon_then_backs_off_to_the_ceiling() -> None:
    backoff = Backoff(2.0)
    assert [backoff.next_s() for _ in range(7)] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    backoff.reset()                      # this worker built something: the next wait starts short again
    assert backoff.next_s() == 0.1
    assert Backoff(0.05).next_s() == 0.05    # a ceiling below the first pause wins


# --- devices -----------------------------------------------------------------------------------------


def test_neuron_builds_get_contiguous_core_ranges_of_the_cores_this_worker_sees() -> None:
    backend = NeuronBackend(env={"NEURON_RT_VISIBLE_CORES": "8-15"})
    assert slot_envs(backend, {}, 4, "ck.yaml") == [{"NEURON_RT_VISIBLE_CORES": v}
                                                     for v in ("8-9", "10-11", "12-13", "14-15")]


def test_tpu_builds_get_their_own_chips_and_runtime_port() -> None:
    envs = slot_envs(TPUBackend(env={}), {"chips": "4"}, 2, "ck.yaml")
    assert [(e["TPU_VISIBLE_CHIPS"], e["TPU_CHIPS_PER_PROCESS_BOUNDS"]) for e in envs] == [("0,1", "1,2,1"),
                                                                                           ("2,3", "1,2,1")]
    assert len({e["TPU_PROCESS_PORT"] for e in envs}) == 2


def test_one_worker_needs_no_devices_and_too_many_workers_name_the_setting() -> None:
    assert slot_envs(NeuronBackend(env={}), {}, 1, "ck.yaml") == [{}]
    with pytest.raises(ConfigError, match=r"ck\.yaml: build\.workers is 3 but backend neuron sees 2 NeuronCores"):
        slot_envs(NeuronBackend(env={}), {"cores": "2"}, 3, "ck.yaml")


# --- workdirs ----------------------------------------------------------------------------------------


def test_only_the_workdirs_of_dead_workers_are_swept(tmp_path: Path) -> None:
    code = ("import os, sys; from pathlib import Path; from cachekeeper.worker.workdirs import workdir\n"
            "with workdir(Path(sys.argv[1])) as wd:\n    (wd / 'big').write_bytes(b'x'); os.kill(os.getpid(), 9)")
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=False, timeout=60,
                   env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    [dead] = list(tmp_path.glob("ck-build-*"))
    with workdir(tmp_path) as live:
        assert sweep_stale(tmp_path) == [dead]
        assert live.is_dir() and not dead.exists()
    assert list(tmp_path.iterdir()) == []


def test_the_device_count_options_do_not_change_the_toolchain_fingerprint(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    from tests.simulated.harness import clear_device_env, install

    clear_device_env(monkeypatch)
    install(monkeypatch, tmp_path / "site")    # simulated torch-neuronx / torch_tpu metadata
    for backend, option in ((NeuronBackend(), "cores"), (TPUBackend(), "chips")):
        assert backend.fingerprint({option: "8"}).id == backend.fingerprint({}).id, backend.name


def test_without_a_catalog_shards_weigh_entries_by_the_seconds_an_older_toolchain_recorded(tmp_path: Path) -> None:
    from cachekeeper.backends.host import HostToolchain
    from cachekeeper.publish.upload import publish
    from cachekeeper.stores.memory import MemoryStore
    from cachekeeper.worker.prebuild import shard_entries
    from tests.builders import fingerprint, spec, write_tree
    from tests.fakes import FakeBackend

    store = MemoryStore()
    specs = [spec(height=64 * (i + 1)) for i in range(6)]
    recorded = [600.0, 100.0, 100.0, 100.0, 100.0, 100.0]   # one slow entry, five quick ones
    for s, seconds in zip(specs, recorded, strict=True):
        publish(store, fingerprint=fingerprint("old"), spec=s, build={"seconds": seconds},
                roots={"cache": write_tree(tmp_path / s.key, {"f": s.key.encode()})}, include=lambda r, p, f: True)
    entries = [MatrixEntry(s, ModelRef("tiny", "transformer", path="/m")) for s in specs]
    tcs = {"fake": HostToolchain("fake", FakeBackend(), fingerprint("new"), {})}

    shards = [shard_entries(entries, tcs, Shard(i, 2), store, None) for i in range(2)]

    assert [len(s) for s in shards] == [1, 5]          # 600 s alone, 5 x 100 s together: 600 vs 500
    assert shards[0][0].spec == specs[0]
    # The new toolchain's own manifests (being built by this run's shards) never move the split.
    publish(store, fingerprint=fingerprint("new"), spec=specs[1], build={"seconds": 5000.0},
            roots={"cache": write_tree(tmp_path / "new", {"f": b"new"})}, include=lambda r, p, f: True)
    assert [shard_entries(entries, tcs, Shard(i, 2), store, None) for i in range(2)] == shards
