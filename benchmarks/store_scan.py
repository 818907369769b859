"""`verify` on S3 (a local SeaweedFS): one inventory scan against the per-object reads it replaced.

    python benchmarks/store_scan.py [--manifests 500] [--repeats 3]

The bucket holds N entry manifests naming 2 small blobs each. "before" is what verify did until the
inventory: read every manifest in turn, then one HEAD per named blob. "after" is `inventory.scan` (manifests
read by 8 threads, blobs and signatures listed a thousand keys per request) and `verify.verify_store`
(sizes from that listing). Both find the same problems (none); prints the median seconds of each.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def fill(store: object, n: int) -> None:
    from cachekeeper.format.fingerprint import Fingerprint
    from cachekeeper.format.layout import blob_key
    from cachekeeper.format.manifest import KIND_ENTRY, BlobRecord, FileRecord, Manifest
    from cachekeeper.format.spec import EntrySpec, Shape
    from cachekeeper.stores.base import Store

    assert isinstance(store, Store)
    fp = Fingerprint.of("fake", {"toolchain": "bench"})
    objects: dict[str, bytes] = {}
    for i in range(n):
        spec = EntrySpec(model=f"m{i}", component="transformer", backend="fake", mode="full",
                         shape=Shape(64, 64, 1), dtype="float32")
        files, blobs = [], []
        for j in range(2):
            data = f"{i}/{j}".encode() * 8
            digest = hashlib.sha256(data).hexdigest()
            files.append(FileRecord("cache", f"k{j}", len(data), digest, digest))
            blobs.append(BlobRecord(digest, len(data), packed=False))
            objects[blob_key(digest)] = data
        m = Manifest(KIND_ENTRY, spec.key, fp, tuple(files), tuple(blobs), spec=spec)
        objects[m.key] = m.to_bytes()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda kv: store.put_bytes(*kv), objects.items()))


def before(store: object) -> int:
    """verify as it was: sequential manifest reads (gc.read_manifests), then a HEAD per named blob."""
    from cachekeeper.format.layout import blob_key
    from cachekeeper.format.manifest import Manifest
    from cachekeeper.stores.base import Store

    assert isinstance(store, Store)
    manifests = [Manifest.from_bytes(store.get_bytes(k), source=k) for k in store.list("manifests/")
                 if k.endswith(".json")]
    checked: dict[str, bool] = {}
    for m in manifests:
        for b in m.blobs:
            if b.digest not in checked:
                checked[b.digest] = store.size(blob_key(b.digest)) == b.size
    return sum(not ok for ok in checked.values())


def after(store: object) -> int:
    from cachekeeper.admin.verify import verify_store
    from cachekeeper.stores.base import Store
    from cachekeeper.stores.inventory import scan

    assert isinstance(store, Store)
    return len(list(verify_store(store, scan(store, debris=False))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--manifests", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import os

    from cachekeeper.stores import open_store
    from tests.harness.process import stop
    from tests.harness.seaweedfs import start_seaweedfs

    with tempfile.TemporaryDirectory(prefix="ck-scan-") as tmp:
        server, proc = start_seaweedfs(Path(tmp))
        try:
            os.environ.update({"AWS_ENDPOINT_URL": server.endpoint_url, "AWS_ACCESS_KEY_ID": server.access_key,
                               "AWS_SECRET_ACCESS_KEY": server.secret_key, "AWS_DEFAULT_REGION": server.region})
            server.client.create_bucket(Bucket="bench")
            store = open_store("s3://bench/scan")
            fill(store, args.manifests)
            times: dict[str, list[float]] = {"before": [], "after": []}
            for rep in range(args.repeats):
                for name, fn in sorted([("before", before), ("after", after)], reverse=rep % 2 == 1):
                    t0 = time.perf_counter()
                    assert fn(store) == 0
                    times[name].append(time.perf_counter() - t0)
            store.close()
        finally:
            stop(proc, 15)
    b, a = statistics.median(times["before"]), statistics.median(times["after"])
    print(f"verify, {args.manifests} manifests / {2 * args.manifests} blobs on SeaweedFS: "
          f"before {b:.2f} s, after {a:.2f} s ({b / a:.1f}x), medians of {args.repeats}")


if __name__ == "__main__":
    main()
