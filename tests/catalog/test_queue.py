"""The distributed build queue: every job built once, dead workers' jobs come back, failures are kept."""

from __future__ import annotations

import threading
import time

import pytest

from cachekeeper.catalog import Catalog, Claim
from cachekeeper.errors import UsageError

WORKERS = 4
JOBS = 24


def test_concurrent_workers_claim_each_job_exactly_once(catalog: Catalog, catalog_url: str) -> None:
    jobs = [("fp0", f"{i:032x}", f'{{"n": {i}}}') for i in range(JOBS)]
    assert catalog.enqueue(jobs) == JOBS
    claimed: list[Claim] = []
    lock = threading.Lock()
    start = threading.Barrier(WORKERS)
    errors: list[BaseException] = []

    def work(name: str) -> None:
        try:
            with Catalog.open(catalog_url) as own:    # each worker its own engine, as on its own machine
                start.wait()
                while (c := own.claim(name, lease_s=60)) is not None:
                    with lock:
                        claimed.append(c)
                    own.finish(c, "d" * 64)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    assert errors == []
    assert sorted((c.fingerprint_id, c.entry_key, c.payload) for c in claimed) == sorted(jobs)
    assert {c.attempts for c in claimed} == {1}
    assert catalog.queue_counts() == {"pending": 0, "running": 0, "done": JOBS, "failed": 0}


def test_enqueue_leaves_existing_jobs_untouched(catalog: Catalog) -> None:
    assert catalog.enqueue([("fp", "a", '{"v": 1}'), ("fp", "b", "{}")]) == 2
    held = catalog.claim("w1", lease_s=60)
    assert held is not None

    assert catalog.enqueue([("fp", "a", '{"v": 2}'), ("fp", "b", "{}"), ("fp", "c", "{}"), ("fp", "c", "{}")]) == 1

    by_key = {j.entry_key: j for j in catalog.jobs()}
    assert (by_key["a"].payload, by_key[held.entry_key].status) == ('{"v": 1}', "running")
    assert catalog.queue_counts() == {"pending": 2, "running": 1, "done": 0, "failed": 0}


def test_an_expired_lease_is_reclaimed_and_the_old_holder_is_fenced_out(catalog: Catalog) -> None:
    catalog.enqueue([("fp", "a", "{}")])
    first = catalog.claim("dead-worker", lease_s=0.3)
    assert first is not None and first.attempts == 1
    assert catalog.claim("w2", lease_s=60) is None          # leased: nobody else gets it

    time.sleep(0.4)
    second = catalog.claim("w2", lease_s=60)

    assert second is not None
    assert (second.entry_key, second.worker, second.attempts) == ("a", "w2", 2)
    assert catalog.renew(first, 60) is False
    catalog.fail(first, "late failure", retry=False)       # ignored: w2 owns the job now
    assert catalog.renew(second, 60) is True
    catalog.finish(second, "e" * 64)
    [job] = catalog.jobs()
    assert (job.status, job.worker, job.manifest_digest, job.last_error) == ("done", "w2", "e" * 64, None)


def test_renew_pushes_the_lease_out(catalog: Catalog) -> None:
    catalog.enqueue([("fp", "a", "{}")])
    c = catalog.claim("w1", lease_s=0.3)
    assert c is not None
    assert catalog.renew(c, 60)
    time.sleep(0.4)
    assert catalog.claim("w2", lease_s=60) is None


def test_fail_with_retry_requeues_and_without_retry_is_final(catalog: Catalog) -> None:
    catalog.enqueue([("fp", "a", "{}")])
    first = catalog.claim("w1", lease_s=60)
    assert first is not None
    catalog.fail(first, "x" * 20_000 + "\nerror: g++ died", retry=True)

    [job] = catalog.jobs()
    assert job.status == "pending" and job.lease_expires_at is None
    assert job.last_error is not None and job.last_error.endswith("g++ died") and len(job.last_error) < 10_000

    second = catalog.claim("w2", lease_s=60)
    assert second is not None and second.attempts == 2
    catalog.fail(second, "oom", retry=False)

    assert catalog.claim("w3", lease_s=60) is None
    assert catalog.queue_counts() == {"pending": 0, "running": 0, "done": 0, "failed": 1}
    assert [(j.status, j.last_error, j.attempts) for j in catalog.jobs(status="failed")] == [("failed", "oom", 2)]


def test_claim_and_counts_can_be_limited_to_one_fingerprint(catalog: Catalog) -> None:
    catalog.enqueue([("fpA", "a", "{}"), ("fpB", "b", "{}")])
    c = catalog.claim("w1", lease_s=60, fingerprint_id="fpB")
    assert c is not None and (c.fingerprint_id, c.entry_key) == ("fpB", "b")
    assert catalog.claim("w1", lease_s=60, fingerprint_id="fpB") is None
    assert catalog.queue_counts("fpA") == {"pending": 1, "running": 0, "done": 0, "failed": 0}


def test_jobs_that_failed_more_often_are_claimed_last(catalog: Catalog) -> None:
    catalog.enqueue([("fp", "flaky", "{}")])
    c = catalog.claim("w1", lease_s=60)
    assert c is not None
    catalog.fail(c, "boom", retry=True)
    catalog.enqueue([("fp", "fresh", "{}")])

    nxt = catalog.claim("w1", lease_s=60)
    assert nxt is not None and nxt.entry_key == "fresh"


def test_a_lease_must_be_positive(catalog: Catalog) -> None:
    with pytest.raises(UsageError):
        catalog.claim("w1", lease_s=0)


def test_requeue_returns_done_and_failed_jobs_to_pending_but_leaves_running_ones(catalog: Catalog) -> None:
    cat = catalog
    cat.enqueue([("fp", "done", "{}"), ("fp", "failed", "{}"), ("fp", "running", "{}")])
    claims = {}
    for _ in range(3):
        c = cat.claim("w", lease_s=60, fingerprint_id="fp")
        assert c is not None
        claims[c.entry_key] = c
    cat.finish(claims["done"], "digest")
    cat.fail(claims["failed"], "boom", retry=False)
    assert cat.requeue([("fp", "done"), ("fp", "failed"), ("fp", "running")]) == 2
    assert cat.queue_counts("fp")["pending"] == 2 and cat.queue_counts("fp")["running"] == 1


# --- holders on this host whose process is gone (revision 0004) --------------------------------------


def _hold(catalog: Catalog, host: str, pid: int) -> None:
    """Claim the next job as if process `pid` of `host` did, under a long, live lease."""
    from sqlalchemy import update

    from cachekeeper.catalog.models import BuildJobModel

    c = catalog.claim("other", lease_s=3600)
    assert c is not None
    with catalog._write() as conn:
        conn.execute(update(BuildJobModel).where(BuildJobModel.entry_key == c.entry_key)
                     .values(holder_host=host, holder_pid=pid))


def _dead_pid() -> int:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid   # reaped: no process has this pid now (a reuse within the test would read as alive)


def test_a_job_held_by_a_dead_process_on_this_host_is_claimable_at_once(catalog: Catalog) -> None:
    from cachekeeper.catalog.queue import host_identity

    catalog.enqueue([("fp", "a", "{}")])
    _hold(catalog, host_identity(), _dead_pid())
    again = catalog.claim("w2", lease_s=60)        # the lease has an hour left; the holder is gone
    assert again is not None and (again.entry_key, again.attempts) == ("a", 2)


def test_a_job_held_by_a_live_process_or_another_host_waits_for_its_lease(catalog: Catalog) -> None:
    import os

    from cachekeeper.catalog.queue import host_identity

    catalog.enqueue([("fp", "a", "{}"), ("fp", "b", "{}")])
    _hold(catalog, host_identity(), os.getpid())          # alive: this very process
    _hold(catalog, "another-host pid:[1]", _dead_pid())   # a pid means nothing on another host
    assert catalog.claim("w2", lease_s=60) is None
