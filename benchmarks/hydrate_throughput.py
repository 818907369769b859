"""Hydrate throughput against a local SeaweedFS, side by side with the tools a team would otherwise use.

    python benchmarks/hydrate_throughput.py [--repeats 3] [--scale 1.0] [--only small|large]

Prints the load average first and last (the host may be shared). Starts SeaweedFS on loopback (the test
harness's launcher), publishes two caches, and times, interleaved (one of each per repeat, in rotating
order), with each one's peak RSS (wait4):

    hydrate           `cachekeeper hydrate` (the fake backend's toolchain), durability "boot" (the default:
                      no per-file fsync; the state file is trusted only within this boot)
    hydrate fsync     the same with `--durability fsync` (each file and directory entry fsynced)
    aws s3 sync       the AWS CLI, same objects as plain files
    boto3 x16         a 16-thread get_object loop writing files
    boto3 seq         a sequential get_object loop writing files
    boto3 seq+fsync   the same, each file fsynced as hydrate does (what durability costs, measured)
    cp -r             a local copy of the same tree (the disk's own ceiling)
    store -> null     a floor no client beats here: curl fetching the objects hydrate reads (the blobs and
                      packs, 16 at a time, presigned), every byte discarded; no writes, no hashing. On this
                      host the store shares the client's cores, so what it costs to serve bounds every
                      method that reads from it
    store -> sha256   the floor of a client that verifies: the same, each body piped into `openssl dgst
                      -sha256` (OpenSSL, as hydrate's hashlib), still nothing written
    curl+openssl      hydrate's work done by C tools, for reference (not a floor: it reads each file back to
                      hash it, where hydrate hashes as it streams): curl writes each object to a file, then
                      `openssl dgst -sha256` hashes the file

Data: (a) 2,000 files of 64–512 KiB in the TorchNeuron layout (<k0k1>/<k2k3>/<32 hex>.neff, ~562 MiB);
(b) 4 x 256 MiB. Prints medians of the repeats (wall, MiB/s, CPU seconds, peak RSS) and the ratios the
issue sets targets on:
(a) hydrate >= 0.95x cp -r; (b) hydrate >= 1.0x boto3 seq and >= 1.5x aws s3 sync. Each target is printed
beside the same ratio for the two floors: where `store -> null` is below the target, no client of this store
meets it on this host; where `store -> sha256` is, no client that checks every byte does.

Measured as a booting node meets them: the timed commands run with their bytecode cached (as a pip
install leaves it), and a many-file tree a run wrote is set aside (`retire`) and deleted only at the
end, never just before the next run: on ext4 without a journal (this machine's disk) every new inode
scans past the inodes deleted in the last 60-360 s (`recently_deleted` in ext4_new_inode; perf put 45%
of a 2,000-file hydrate's CPU there when the previous run's tree was deleted just before it).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
MiB = 1 << 20

BOTO_LOOP = """
import os, sys, boto3
from concurrent.futures import ThreadPoolExecutor
from botocore.config import Config
bucket, prefix, dest, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
durable = sys.argv[5:] == ["fsync"]
s3 = boto3.client("s3", config=Config(max_pool_connections=32, s3={"addressing_style": "path"}))
keys = [o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for o in p.get("Contents", ())]
def get(key):
    path = os.path.join(dest, key[len(prefix):])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    with open(path, "wb") as f:
        for chunk in body.iter_chunks(1 << 20):
            f.write(chunk)
        if durable:
            f.flush(); os.fsync(f.fileno())
if threads == 1:
    for k in keys: get(k)
else:
    with ThreadPoolExecutor(threads) as pool: list(pool.map(get, keys))
"""


# The targets: hydrate's rate over each other method's, per data set.
TARGETS = {"small": {"cp -r": 0.95}, "large": {"boto3 seq": 1.0, "aws s3 sync": 1.5}}


def reach(floor: float, target: float, *, ceiling: bool = False) -> str:
    """Whether a floor measured on this host leaves a target within reach: a speed-up target is a minimum
    (a floor below it cannot be beaten), a `ceiling` target (a time ratio) a maximum."""
    out = floor > target if ceiling else floor < target
    return "out of reach here" if out else "within reach"


def neuron_tree(root: Path, n: int, rng: random.Random) -> int:
    total = 0
    for _ in range(n):
        key = f"{rng.getrandbits(128):032x}"
        size = rng.randrange(64 << 10, 512 << 10)
        p = root / key[:2] / key[2:4] / f"{key}.neff"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rng.randbytes(size))
        total += size
    return total


def large_tree(root: Path, n: int, size: int) -> int:
    root.mkdir(parents=True, exist_ok=True)
    block = os.urandom(16 * MiB)
    for i in range(n):
        with open(root / f"big{i}.bin", "wb") as f:
            for _ in range(size // len(block)):
                f.write(os.urandom(16) + block[16:])   # distinct blocks, cheap to make
    return n * size


def run(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, float]:
    """(wall seconds, peak RSS MiB, CPU seconds user+sys) of one command. Started through GNU time when
    there is one: a child forked straight from this (large) process would report our RSS, which Linux
    carries across exec."""
    timer = shutil.which("time") or ("/usr/bin/time" if Path("/usr/bin/time").exists() else None)
    report = cwd / "rss.txt"
    full = [timer, "-f", "%M %U %S", "-o", str(report), *argv] if timer else argv
    t0 = time.perf_counter()
    proc = subprocess.run(full, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:4]} failed: {proc.stderr.decode()[-2000:]}")
    if not timer:
        return wall, float("nan"), float("nan")
    rss, user, system = map(float, report.read_text().split()[-3:])
    return wall, rss / 1024, user + system


@contextlib.contextmanager
def seaweed_session(prefix: str) -> Iterator[tuple[Path, Any, dict[str, str]]]:
    """(temp dir, SeaweedFS on loopback, the env a hydrate of the fake backend runs with); this process's
    own AWS_* and backend variables point at it too. Stopped (and the dir removed) at the end."""
    from benchmarks.catalog_scale import installed_env
    from tests.harness.process import stop
    from tests.harness.seaweedfs import start_seaweedfs

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp_s:
        tmp = Path(tmp_s)
        (tmp / "weed").mkdir()
        server, proc = start_seaweedfs(tmp / "weed")
        try:
            env = {**installed_env(), "AWS_ENDPOINT_URL": server.endpoint_url,
                   "AWS_ACCESS_KEY_ID": server.access_key,
                   "AWS_SECRET_ACCESS_KEY": server.secret_key, "AWS_DEFAULT_REGION": server.region,
                   "PYTHONPATH": str(REPO), "CACHEKEEPER_BACKENDS": "fake=tests.fakes:FakeBackend",
                   "FAKE_SHARED_DIR": str(tmp / "shared"), "CACHEKEEPER_HOME": str(tmp / "home")}
            os.environ.update({k: env[k] for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                                     "AWS_DEFAULT_REGION", "CACHEKEEPER_BACKENDS")})
            yield tmp, server, env
        finally:
            stop(proc, 15)


def retire(path: Path, trash: Path) -> None:
    """Set a tree a timed run wrote aside, to be deleted at the end (`empty_trash`): deleting thousands of
    inodes right before the next timed run would charge that run for ext4's scan past them (see above).
    A tree of a few files is deleted at once: that costs the next run nothing."""
    if not path.exists():
        return
    if sum(len(files) for _, _, files in os.walk(path)) <= 100:
        shutil.rmtree(path, ignore_errors=True)
        return
    trash.mkdir(exist_ok=True)
    path.rename(trash / f"{path.name}-{time.monotonic_ns()}")


def empty_trash(trash: Path) -> None:
    shutil.rmtree(trash, ignore_errors=True)


def inode_probe(where: Path, n: int = 200) -> str:
    """What one new directory and one new file cost here now, in microseconds: ext4 scans past inodes
    deleted in the last minutes at each allocation (see above), so the same tree's figures differ by
    several times between a quiet disk and one that a package install just churned. Printed with every
    run so two runs' figures can be compared. The probe's own inodes stay until `where` is removed at
    the end: deleting them now would charge the first timed runs."""
    probe = where / "inode-probe"
    probe.mkdir()
    t0 = time.perf_counter()
    for i in range(n):
        os.mkdir(probe / f"d{i}")
    t1 = time.perf_counter()
    for i in range(n):
        (probe / f"d{i}" / "f").touch()
    t2 = time.perf_counter()
    return f"new inodes in {where.parent}: mkdir {(t1 - t0) / n * 1e6:.0f} us, create {(t2 - t1) / n * 1e6:.0f} us"


def upload_raw(client: object, bucket: str, prefix: str, root: Path) -> None:
    files = [p for p in root.rglob("*") if p.is_file()]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda p: client.upload_file(str(p), bucket, prefix + p.relative_to(root).as_posix()),  # type: ignore[attr-defined]
                      files))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0, help="shrink both data sets (e.g. 0.25 on a busy host)")
    ap.add_argument("--only", choices=["small", "large"])
    args = ap.parse_args()

    from cachekeeper import snapshot  # noqa: F401  (imported for its constants)
    from cachekeeper.publish.upload import publish
    from cachekeeper.stores import open_store
    from tests.builders import fingerprint, spec

    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (uptime)", flush=True)
    aws = shutil.which("aws")
    with seaweed_session("ck-tput-") as (tmp, server, env):
        print(inode_probe(tmp), flush=True)
        datasets: list[tuple[str, int, Callable[[Path], int]]] = []
        rng = random.Random(8)
        n = max(10, int(2000 * args.scale))
        size = max(16 * MiB, int(256 * MiB * args.scale) // (16 * MiB) * 16 * MiB)
        if args.only in (None, "small"):
            datasets.append(("small", n, functools.partial(neuron_tree, n=n, rng=rng)))
        if args.only in (None, "large"):
            datasets.append(("large", 4, functools.partial(large_tree, n=4, size=size)))
        for label, count, make in datasets:
            bench(label, count, make, tmp, env, server, args.repeats, aws, publish, open_store, fingerprint, spec)
    print(f"\nload at the end: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


def bench(label: str, count: int, make: Callable[[Path], int], tmp: Path, env: dict[str, str], server: object,
          repeats: int, aws: str | None, publish: Callable[..., object], open_store: Callable[..., object],
          fingerprint: Callable[[], object], spec: Callable[[str], object]) -> None:
    src = tmp / f"src-{label}"
    total = make(src)
    bucket = f"bench-{label}"
    client = server.client  # type: ignore[attr-defined]
    client.create_bucket(Bucket=bucket)
    url = f"s3://{bucket}/ck"
    publish(open_store(url), fingerprint=fingerprint(), spec=spec(label), roots={"cache": src},
            include=lambda r, rel, p: True)
    upload_raw(client, bucket, "raw/", src)
    print(f"\n== ({'a' if label == 'small' else 'b'}) {count} files, {total / MiB:.0f} MiB ==", flush=True)

    py = sys.executable
    methods: dict[str, Callable[[Path], list[str]]] = {
        "hydrate": lambda d: [py, "-m", "cachekeeper", "hydrate", "--backend", "fake", "--store", url,
                              "--dest", str(d)],
        "hydrate fsync": lambda d: [py, "-m", "cachekeeper", "hydrate", "--backend", "fake", "--store", url,
                                    "--dest", str(d), "--durability", "fsync"],
        "boto3 x16": lambda d: [py, "-c", BOTO_LOOP, bucket, "raw/", str(d), "16"],
        "boto3 seq": lambda d: [py, "-c", BOTO_LOOP, bucket, "raw/", str(d), "1"],
        "boto3 seq+fsync": lambda d: [py, "-c", BOTO_LOOP, bucket, "raw/", str(d), "1", "fsync"],
        "cp -r": lambda d: ["cp", "-r", str(src), str(d)],
    }
    if aws:
        methods["aws s3 sync"] = lambda d: [aws, "s3", "sync", "--only-show-errors", "--endpoint-url",
                                            server.endpoint_url, f"s3://{bucket}/raw/", str(d)]  # type: ignore[attr-defined]
    curl = shutil.which("curl")
    if curl:
        urls = tmp / f"urls-{label}.txt"
        store = open_store(url)
        urls.write_text("".join(store.prepared_get(k).url + "\n" for k in store.list("blobs/")))  # type: ignore[attr-defined]
        each = ["xargs", "-a", str(urls), "-P", "16", "-n", "1"]   # one command per object URL, 16 at a time
        methods["store -> null"] = lambda d: [*each, curl, "-sf", "-o", "/dev/null"]
        if shutil.which("openssl"):
            methods["store -> sha256"] = lambda d: [
                *each, "bash", "-o", "pipefail", "-c", f'{curl} -sf "$1" | openssl dgst -sha256 >/dev/null', "_"]
            methods["curl+openssl"] = lambda d: [   # $0: the dest dir; $1: the URL, its file named by the key's tail
                *each, "bash", "-c", f'u=${{1%%\\?*}}; f="$0/${{u##*/}}"; '
                f'{curl} -sf --create-dirs -o "$f" "$1" && openssl dgst -sha256 "$f" >/dev/null', str(d)]
    results: dict[str, list[tuple[float, float, float]]] = {m: [] for m in methods}
    names = list(methods)
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:  # rotate the order every repeat
            dest = tmp / "dest"
            retire(dest, tmp / "trash")
            results[name].append(run(methods[name](dest), env, tmp))
            retire(dest, tmp / "trash")
    rate = {m: total / MiB / statistics.median(w for w, _, _ in rs) for m, rs in results.items()}
    for m, rs in results.items():
        walls = [w for w, _, _ in rs]
        cpu = statistics.median(c for _, _, c in rs)
        print(f"{m:15} median {statistics.median(walls):6.2f}s  {rate[m]:7.0f} MiB/s  "
              f"peak RSS {max(r for _, r, _ in rs):5.0f} MiB  CPU {cpu:5.2f}s ({cpu / (total / (1 << 30)):.2f}s/GiB)"
              f"   (runs: {', '.join(f'{w:.2f}' for w in walls)})")
    for ours in ("hydrate", "hydrate fsync"):
        for other in (m for m in methods if not m.startswith(("hydrate", "store ->"))):
            print(f"{ours:13} / {other:15} {rate[ours] / rate[other]:.2f}x")
    for other, target in TARGETS[label].items():
        if other not in rate:
            continue
        ratios = {f: rate[f] / rate[other] for f in ("store -> null", "store -> sha256") if f in rate}
        floors = "; ".join(f"{f} {r:.2f}x ({reach(r, target)})" for f, r in ratios.items())
        print(f"target hydrate / {other} >= {target}x: hydrate {rate['hydrate'] / rate[other]:.2f}x; floors: {floors}")
    shutil.rmtree(src, ignore_errors=True)
    empty_trash(tmp / "trash")


if __name__ == "__main__":
    main()
