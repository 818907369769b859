"""`diff` planning: fields, one-sided entries, rebuild cost over N workers; bad ids and --set fields."""

from __future__ import annotations

import pytest

from cachekeeper.catalog.rows import EntryCost
from cachekeeper.errors import UsageError
from cachekeeper.format.fingerprint import Fingerprint
from cachekeeper.inspection.diff import makespan, plan_diff, render_text, resolve_prefix, with_overrides

A = Fingerprint.of("neuron", {"torch": "2.13.0", "neuronx_cc": "2.21.0", "target": "trn2"})


def test_makespan_schedules_longest_first_over_the_workers() -> None:
    assert makespan([3, 3, 2, 2, 2], 1) == 12
    assert makespan([3, 3, 2, 2, 2], 2) == 7           # {3,2,2} and {3,2}: LPT, within 4/3 of the optimum 6
    assert makespan([10, 1, 1], 8) == 10               # never below the longest build
    assert makespan([], 4) == 0
    with pytest.raises(UsageError):
        makespan([1], 0)


def test_a_diff_lists_differing_fields_one_sided_entries_and_the_rebuild_cost() -> None:
    b = with_overrides(A, ["torch=2.14.0", "neuronx_cc=2.23.0"])
    only_a = [EntryCost("k1" * 16, "flux 1024", 5_000_000, 600.0), EntryCost("k2" * 16, "flux 512", 3_000_000, 300.0),
              EntryCost("k3" * 16, "flux 256", 1_000_000, None)]
    d = plan_diff(A, b, only_a, [], workers=2)
    assert d.fields == {"neuronx_cc": ("2.21.0", "2.23.0"), "torch": ("2.13.0", "2.14.0")}
    cost = d.rebuild_for_b
    assert (cost.entries, cost.size, cost.seconds, cost.unknown, cost.wall_seconds) == (3, 9_000_000, 900.0, 1, 600.0)
    assert d.rebuild_for_a.entries == 0
    text = "\n".join(render_text(d))
    assert "  torch       2.13.0  ->  2.14.0" in text.splitlines()
    assert "3 entries built for A, not for B (9.0 MB)" in text
    assert "15m00s of recorded build time, 10m00s on 2 workers; 1 without a recorded build time" in text
    doc = d.to_dict()
    assert doc["fields"]["torch"] == {"a": "2.13.0", "b": "2.14.0"} and len(doc["only_a"]) == 3


def test_a_set_of_a_field_the_backend_lacks_is_one_error_naming_the_fields() -> None:
    with pytest.raises(UsageError, match="the neuron fingerprint has no field 'neuronx-cc'") as err:
        with_overrides(A, ["neuronx-cc=2.23.0"])
    assert err.value.hint == "fields: neuronx_cc, target, torch"
    with pytest.raises(UsageError, match="FIELD=VALUE"):
        with_overrides(A, ["torch"])


def test_fingerprint_prefixes_resolve_to_exactly_one_id() -> None:
    ids = ["a1b2c3d4e5f60718", "a1b2ffffffffffff", "0000000000000000"]
    assert resolve_prefix("a1b2c", ids) == "a1b2c3d4e5f60718"
    assert resolve_prefix("0000000000000000", ids) == "0000000000000000"
    with pytest.raises(UsageError, match="fingerprint prefix 'a1b2' matches 2: a1b2c3d4e5f60718, a1b2ffffffffffff"):
        resolve_prefix("a1b2", ids)
    with pytest.raises(UsageError, match="no fingerprint 'beef' in the catalog"):
        resolve_prefix("beef", ids)
    for bad in ("", "a1b2c3d4e5f607189", "xyz", "a1b2%"):
        with pytest.raises(UsageError, match="is not a fingerprint id"):
            resolve_prefix(bad, ids)
